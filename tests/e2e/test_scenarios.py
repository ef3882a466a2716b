"""The seed's scenario list, one named test each (docs/reliability.md maps them).

The scenarios about provider webhooks and the reconciler (duplicate webhook, invalid webhook
signature, webhook after a poll completed the job, delayed or out-of-order event, provider
status fetch failing temporarily) and the create timeout over real HTTP are in
test_provider_scenarios.py, through the provider simulator server and separate processes.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from jobgate import errors
from jobgate.config import ProviderConfig, load_settings
from jobgate.domain.states import JobState
from jobgate.process.runtime import Runtime
from jobgate.providers.registry import ProviderRegistry
from jobgate.services.jobs import SubmitSpec
from jobgate.storage.protocol import Storage
from jobgate.testing import Block, Fail, FakeClock, ScriptedProvider, SequentialIds, Succeed
from tests.e2e.support import (
    Api,
    Load,
    assert_completed_once,
    create_tenant,
    job_body,
    wait_settled,
)
from tests.support import audit
from tests.support.processes import JobgateProcess, ProcessHarness, wait_until

pytestmark = pytest.mark.e2e


# -- the all-in-one process on SQLite, shared by the read-only scenarios ------------------


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Api, str]]:
    directory = tmp_path_factory.mktemp("serve")
    db_url = f"sqlite:///{directory}/jobgate.db"
    with ProcessHarness(directory, env={"JOBGATE_DATABASE_URL": db_url}) as harness:
        process = harness.start("serve")
        assert process.url is not None
        api = Api(process.url, harness.default_api_key(process.url), close_after_test=False)
        yield api, db_url
        api.close()


def test_immediate_completion(serve: tuple[Api, str]) -> None:
    api, db_url = serve
    response = api.client.post(
        "/v1/jobs", json=job_body("right away"), headers={"Prefer": "wait=30"}
    )
    # Finished within the wait: 200 with the result, not 202.
    assert response.status_code == 200, response.text
    job = response.json()
    assert job["status"] == "succeeded" and response.headers["Preference-Applied"] == "wait=30"
    assert job["result"]["choices"][0]["message"]["content"] == "echo: right away"
    assert [e["to"] for e in api.events(job["id"])] == ["queued", "running", "succeeded"]
    assert_completed_once(audit.job_facts(db_url, [job["id"]]))


def test_provider_failure(serve: tuple[Api, str]) -> None:
    api, db_url = serve
    transient = api.submit(job_body("flaky", fail_with="server_error", fail_times=1))
    limited = api.submit(
        job_body("limited", fail_with="rate_limit", fail_times=1, retry_after_s=0.1)
    )
    fatal = api.submit(job_body("bad", fail_with="invalid_request"))
    broken = api.submit(job_body("down", fail_with="server_error"))
    facts = wait_settled(db_url, [transient, limited, fatal, broken])
    # A retryable error retries with backoff and then succeeds (attempt 2).
    assert facts[transient].state == "succeeded" and facts[transient].attempt == 2
    # A rate limit is not a failed attempt: retried after Retry-After, the attempt refunded.
    assert facts[limited].state == "succeeded" and facts[limited].attempt == 1
    assert facts[limited].claims == 2
    # A fatal error fails at once, not retried.
    assert facts[fatal].state == "failed" and facts[fatal].claims == 1
    assert api.get(fatal)["error"]["code"] == "invalid_request"
    # Retryable forever: dead-lettered after max_attempts.
    assert facts[broken].state == "failed" and facts[broken].dead_lettered
    assert facts[broken].claims == 3 and facts[broken].error_code == "server_error"
    for job in facts.values():
        assert job.terminal_events == 1


def test_several_minute_completion(tmp_path: Path) -> None:
    """A five-minute provider call under a 60 s lease, on a fake clock: heartbeats keep the
    lease, the reaper leaves it alone, a long poll answers on the completion."""

    async def scenario() -> None:
        clock = FakeClock()
        block = Block()
        provider = ScriptedProvider("scripted", script=[block])
        settings = load_settings(
            {}, database_url=f"sqlite:///{tmp_path}/jobgate.db", default_provider="sim"
        )
        registry = ProviderRegistry(
            {"scripted": provider},
            configs={"scripted": ProviderConfig(kind="sim")},
            default="scripted",
        )
        runtime = Runtime(settings, clock=clock, ids=SequentialIds(), providers=registry)
        await runtime.open()
        try:
            tenant = (await runtime.tenants.create("acme")).tenant
            spec = SubmitSpec(endpoint="/v1/chat/completions", body={"model": "m"})
            job = (await runtime.jobs.submit(tenant_id=tenant.id, spec=spec)).job
            worker = runtime.worker()
            reaper = runtime.reaper()
            (claimed,) = await worker.claim()
            running = asyncio.create_task(worker.execute(claimed))
            await block.started.wait()
            poll = asyncio.create_task(
                runtime.jobs.wait(
                    tenant_id=tenant.id, job_id=job.id, timeout_s=60, until_terminal=True
                )
            )
            for _ in range(20):  # 20 x 15 s = five minutes of heartbeats
                clock.advance(settings.heartbeat_interval_s)
                await worker.heartbeat_once()
                assert (await reaper.reap_once()).total == 0
            current = await runtime.jobs.get(tenant_id=tenant.id, job_id=job.id)
            assert current.state is JobState.RUNNING
            assert current.lease_expires_at is not None
            assert current.lease_expires_at > claimed.started_at + timedelta(seconds=300)  # type: ignore[operator]
            assert not poll.done()
            block.release.set()
            done = await running
            assert done is not None and done.state is JobState.SUCCEEDED
            answered = await asyncio.wait_for(poll, timeout=10)
            assert answered.state is JobState.SUCCEEDED
            events = await runtime.storage.job_events(job_id=job.id)
            assert [e.to_state for e in events] == ["queued", "running", "succeeded"]
            assert len(provider.calls) == 1
        finally:
            await runtime.close()

    asyncio.run(scenario())


@pytest.mark.parametrize("policy", ["fail", "retry"])
async def test_create_timeout_with_unknown_outcome(
    storage: Storage, clock: FakeClock, policy: str
) -> None:
    """The provider's create call timed out without an answer: did it run? With
    JOBGATE_UNKNOWN_OUTCOME=fail the job fails, marked creation_outcome=unknown (no second,
    possibly double-billed call); with `retry` it is retried like a server error."""
    unknown = errors.ProviderOutcomeUnknown("create timed out after it was sent")
    provider = ScriptedProvider("scripted", script=[Fail(unknown)], default=Succeed())
    settings = load_settings({}, unknown_outcome=policy, retry_base_s=0.01, retry_max_s=0.01)
    registry = ProviderRegistry(
        {"scripted": provider}, configs={"scripted": ProviderConfig(kind="sim")}, default="scripted"
    )
    runtime = Runtime(settings, storage=storage, clock=clock, providers=registry)
    tenant = (await runtime.tenants.create("acme")).tenant
    spec = SubmitSpec(endpoint="/v1/chat/completions", body={"model": "m"})
    job = (await runtime.jobs.submit(tenant_id=tenant.id, spec=spec)).job
    worker = runtime.worker()
    (first,) = await worker.run_once()
    assert first is not None and first.creation_outcome == "unknown"
    if policy == "fail":
        assert first.state is JobState.FAILED
        assert first.error is not None and first.error["code"] == "creation_outcome_unknown"
        assert len(provider.calls) == 1
        return
    assert first.state is JobState.QUEUED
    clock.advance(1)
    second = None
    for _ in range(500):  # the retry is due after a jittered delay (on PostgreSQL's clock)
        ran = await worker.run_once()
        if ran:
            (second,) = ran
            break
        await asyncio.sleep(0.01)
    assert second is not None and second.state is JobState.SUCCEEDED
    assert len(provider.calls) == 2
    events = await storage.job_events(job_id=job.id)
    assert sum(1 for e in events if e.to_state.terminal and e.applied) == 1


# -- cancellation racing completion -------------------------------------------------------


@pytest.mark.postgres
def test_cancellation_racing_completion(harness: ProcessHarness, pg_dsn: str) -> None:
    """Cancels land at random moments around completion, through separate api and worker
    processes: the first committed terminal state wins, every cancel answers 200, and each
    job has exactly one terminal event (cancelled, or succeeded with its result)."""
    harness.env["JOBGATE_DATABASE_URL"] = pg_dsn
    process = harness.start("api")
    harness.start("worker", ready=False)
    harness.start("reaper", ready=False)
    assert process.url is not None
    api = Api(process.url, create_tenant(pg_dsn, "acme"))
    rng = random.Random(7)
    ids = [api.submit(job_body(f"race {n}", latency_s=0.4)) for n in range(24)]
    started = time.monotonic()
    for job_id, delay in sorted(((i, rng.uniform(0, 1.2)) for i in ids), key=lambda p: p[1]):
        time.sleep(max(0.0, started + delay - time.monotonic()))
        response = api.client.post(f"/v1/jobs/{job_id}/cancel")
        assert response.status_code == 200, response.text
    facts = wait_settled(pg_dsn, ids)
    outcomes = {job.state for job in facts.values()}
    assert outcomes <= {"succeeded", "cancelled"}
    for job in facts.values():
        assert job.terminal_events == 1, job.events
        body = api.get(job.id)
        if job.state == "succeeded":
            assert job.ledger_rows == 1 and body["result"] is not None
        else:
            assert job.ledger_rows == 0 and body["result"] is None
            assert body["cancel_requested_at"] is not None


@pytest.mark.parametrize("winner", ["completion", "cancel"])
async def test_cancellation_racing_completion_orderings(
    storage: Storage, clock: FakeClock, winner: str
) -> None:
    """Both orders of the race, made deterministic: a cancel requested while the provider is
    answering; whichever commits its terminal state first wins, the other is not applied."""
    block = Block()
    provider = ScriptedProvider("scripted", script=[block])
    registry = ProviderRegistry(
        {"scripted": provider}, configs={"scripted": ProviderConfig(kind="sim")}, default="scripted"
    )
    runtime = Runtime(load_settings({}), storage=storage, clock=clock, providers=registry)
    tenant = (await runtime.tenants.create("acme")).tenant
    spec = SubmitSpec(endpoint="/v1/chat/completions", body={"model": "m"})
    job = (await runtime.jobs.submit(tenant_id=tenant.id, spec=spec)).job
    worker = runtime.worker()
    (claimed,) = await worker.claim()
    running = asyncio.create_task(worker.execute(claimed))
    await block.started.wait()
    requested = await runtime.jobs.cancel(tenant_id=tenant.id, job_id=job.id)
    assert requested.state is JobState.RUNNING and requested.cancel_requested_at is not None
    if winner == "completion":
        block.release.set()  # the answer arrives before the worker hears of the cancel
    else:
        worker.on_cancel_requested([job.id])
    final = await running
    assert final is not None
    expected = JobState.SUCCEEDED if winner == "completion" else JobState.CANCELLED
    assert final.state is expected
    settled = await storage.job_get(job_id=job.id)
    assert settled is not None and settled.state is expected
    # A cancel after the terminal state changes nothing and is not a conflict.
    again = await runtime.jobs.cancel(tenant_id=tenant.id, job_id=job.id)
    assert again.state is expected and again.event_seq == settled.event_seq
    events = await storage.job_events(job_id=job.id)
    assert sum(1 for e in events if e.applied and e.to_state.terminal) == 1
    usage = await storage.usage_for_job(job_id=job.id)
    assert len(usage) == (1 if winner == "completion" else 0)


# -- crashes and restarts of the all-in-one process -----------------------------------------


def _serve_alone(harness: ProcessHarness, tmp_path: Path, **env: str) -> JobgateProcess:
    harness.env["JOBGATE_DATABASE_URL"] = f"sqlite:///{tmp_path}/jobgate.db"
    return harness.start("serve", env=env)


def test_restart_while_running(harness: ProcessHarness, tmp_path: Path) -> None:
    serve = _serve_alone(harness, tmp_path)
    assert serve.url is not None
    api = Api(serve.url, harness.default_api_key(serve.url))
    ids = [api.submit(job_body(f"long {n}", latency_s=1.5)) for n in range(5)]
    db_url = f"sqlite:///{tmp_path}/jobgate.db"
    wait_until(
        lambda: all(f.state == "running" for f in audit.job_facts(db_url, ids).values()),
        what="the jobs to start",
    )
    serve.kill()
    serve.start().wait_ready()
    facts = wait_settled(db_url, ids)
    assert_completed_once(facts)
    assert all(job.claims == 2 and job.lost_count == 1 for job in facts.values())


@pytest.mark.parametrize("point", ["before_finish_commit", "after_finish_commit"])
def test_terminal_result_processing_crashing_halfway(
    harness: ProcessHarness, tmp_path: Path, point: str
) -> None:
    """The provider answered and the process died while recording the verdict: before the
    commit the job is run again after the lease expires; after it, nothing is redone."""
    serve = _serve_alone(harness, tmp_path, JOBGATE_FAILPOINTS=f"{point}=kill")
    assert serve.url is not None
    api = Api(serve.url, harness.default_api_key(serve.url))
    job_id = api.submit(job_body(f"crash at {point}"))
    wait_until(lambda: not serve.alive, what="the crash")
    assert serve.returncode == -9
    del serve.env["JOBGATE_FAILPOINTS"]
    serve.start().wait_ready()
    db_url = f"sqlite:///{tmp_path}/jobgate.db"
    facts = wait_settled(db_url, [job_id])
    assert_completed_once(facts)
    assert facts[job_id].claims == (1 if point == "after_finish_commit" else 2)
    assert api.get(job_id)["result"]["choices"][0]["message"]["content"].startswith("echo:")


# -- deployment: a rolling restart of every role ---------------------------------------------


@pytest.mark.postgres
def test_deployment_rolling_restart_of_every_role(harness: ProcessHarness, pg_dsn: str) -> None:
    """Every process is replaced one at a time by SIGTERM and a fresh start while clients keep
    submitting (trying the other API when one is down): no request is refused by both APIs,
    no job is lost or run twice, and no lease has to expire (workers hand their jobs back)."""
    harness.env["JOBGATE_DATABASE_URL"] = pg_dsn
    harness.env["JOBGATE_LEASE_TTL_S"] = "30"  # a lease expiry would show in the timing
    harness.env["JOBGATE_HEARTBEAT_INTERVAL_S"] = "1"
    harness.env["JOBGATE_SHUTDOWN_GRACE_S"] = "0.5"  # shorter than a call: some are handed back
    apis = [harness.start("api", ready=False) for _ in range(2)]
    workers = [harness.start("worker", ready=False) for _ in range(2)]
    reaper = harness.start("reaper", ready=False)
    roles = [apis[0], workers[0], reaper, apis[1], workers[1]]
    for process in roles:
        process.wait_ready()
    urls = [p.url for p in apis if p.url is not None]
    key = create_tenant(pg_dsn, "acme")
    with Load(urls, key, interval_s=0.05, latency_s=1.5) as load:
        wait_until(lambda: len(load.accepted) >= 10, what="some accepted jobs")
        for process in roles:
            assert process.terminate(timeout_s=60) == 0, process.tail()
            process.start().wait_ready()
            _wait_for_more(load, 3)
    assert {s for s in load.statuses if s not in (200, 202)} == set(), load.statuses
    facts = wait_settled(pg_dsn, list(audit.job_facts(pg_dsn)), timeout_s=120)
    assert set(load.accepted) <= set(facts)
    assert_completed_once(facts)
    assert not [job.id for job in facts.values() if job.lost_count], "a lease had to expire"
    # Guard against a vacuous pass: the restarts really did catch work in flight.
    handed_back = [e for job in facts.values() for e in job.events if e[3] == "worker_shutdown"]
    assert handed_back


def _wait_for_more(load: Load, count: int) -> None:
    before = len(load.accepted)
    wait_until(lambda: len(load.accepted) >= before + count, what="more accepted submits")
