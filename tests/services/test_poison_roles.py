"""A poison row never stops a role: for the worker, the reaper, the reconciler and the
dispatcher, a job (or delivery) holding stored values no client could send any more is failed
alone — terminal `failed`, dead-lettered, `error.code = poison_job`, an event, a log line with the
traceback and no content — and the role goes on with the healthy job behind it. Both backends."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import pytest
from prometheus_client import REGISTRY

from jobgate import errors
from jobgate.domain.job import Job
from jobgate.domain.states import JobState
from jobgate.process.runtime import Runtime
from jobgate.roles.dispatcher import Dispatcher
from jobgate.roles.reconciler import POISON_AFTER_FAILURES
from jobgate.storage import text_escape
from jobgate.storage.protocol import Storage
from jobgate.testing import FakeClock, ScriptedProvider, Succeed
from tests.roles.test_dispatcher import dev_settings
from tests.roles.test_worker_background import DUE_S, make_rig
from tests.storage.helpers import make_tenant, new_job, submit_one
from tests.storage.poison_rows import far_future, poisons, poke
from tests.storage.webhook_helpers import finish_job, make_endpoint

SECRET_WORDS = "a prompt nobody may log"


def poisoned_count(role: str) -> float:
    return REGISTRY.get_sample_value("jobgate_poison_jobs_total", {"role": role}) or 0.0


def assert_failed_alone(job: Job | None) -> None:
    assert job is not None
    assert job.state is JobState.FAILED and job.dead_lettered
    assert job.error is not None and job.error["code"] == "poison_job"


def poison_logs(caplog: pytest.LogCaptureFixture, role: str) -> list[logging.LogRecord]:
    found = [
        r
        for r in caplog.records
        if r.getMessage() == "poison job failed alone" and getattr(r, "role", None) == role
    ]
    for record in found:  # column names and frames, never a stored value
        assert SECRET_WORDS not in str(record.__dict__)
    return found


async def insert(storage: Storage, tenant: Any, clock: FakeClock, **fields: Any) -> Job:
    body = {"model": "sim-echo", "messages": [{"role": "user", "content": SECRET_WORDS}]}
    job = new_job(tenant, request=body, **fields)
    return (await submit_one(storage, job=job, now=clock.now())).job


# -- worker ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["deadline_year_11533", "request_not_an_object"])
async def test_worker_fails_a_poison_job_alone_and_runs_the_next(
    runtime: Runtime, clock: FakeClock, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    await worker_fails_alone_then_runs_the_next(runtime, clock, caplog, kind)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # jsonb holds only valid JSON
async def test_worker_fails_a_request_that_is_not_json_alone(
    runtime: Runtime, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    await worker_fails_alone_then_runs_the_next(runtime, clock, caplog, "request_not_json")


async def worker_fails_alone_then_runs_the_next(
    runtime: Runtime, clock: FakeClock, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    storage = runtime.storage
    columns = poisons(storage)[kind]
    tenant = await make_tenant(storage)
    poison = await insert(storage, tenant, clock, priority=0)  # claimed first
    healthy = await insert(storage, tenant, clock, priority=9)
    await poke(storage, "jobs", poison.id, **columns)
    before = poisoned_count("worker")
    worker = runtime.worker(concurrency=1)
    caplog.set_level(logging.INFO)

    [failed] = await worker.run_once()
    assert failed is not None and failed.id == poison.id
    assert_failed_alone(failed)
    events = await storage.job_events(job_id=poison.id)
    assert (events[-1].to_state, events[-1].reason) == (JobState.FAILED, "poison_job")
    assert poisoned_count("worker") == before + 1
    assert [r.job_id for r in poison_logs(caplog, "worker")] == [poison.id]  # type: ignore[attr-defined]

    [done] = await worker.run_once()
    assert done is not None and done.id == healthy.id and done.state is JobState.SUCCEEDED


async def test_worker_fails_a_job_whose_handling_raises_with_its_traceback(
    runtime: Runtime,
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    storage = runtime.storage
    tenant = await make_tenant(storage)
    poison = await insert(storage, tenant, clock, priority=0)
    healthy = await insert(storage, tenant, clock, priority=9)
    worker = runtime.worker(concurrency=1)
    real_get = runtime.providers.get

    def get(name: str, **kwargs: Any) -> Any:
        if worker.inflight and poison.id in {lease.job_id for lease in worker.held_leases()}:
            raise KeyError(SECRET_WORDS)  # a bug that quotes a stored value
        return real_get(name, **kwargs)

    monkeypatch.setattr(runtime.providers, "get", get)
    caplog.set_level(logging.INFO)
    [failed] = await worker.run_once()
    assert_failed_alone(failed)
    assert failed is not None and failed.error is not None
    assert "KeyError" in failed.error["message"] and SECRET_WORDS not in failed.error["message"]
    [record] = poison_logs(caplog, "worker")
    assert "Traceback" in record.traceback and "KeyError" in record.traceback  # type: ignore[attr-defined]
    [done] = await worker.run_once()
    assert done is not None and done.id == healthy.id and done.state is JobState.SUCCEEDED


# -- reaper ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["deadline_year_11533", "request_not_an_object"])
async def test_reaper_fails_a_poison_job_alone_and_reclaims_the_rest(
    runtime: Runtime, clock: FakeClock, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    storage = runtime.storage
    tenant = await make_tenant(storage)
    poison = await insert(storage, tenant, clock, priority=0)
    healthy = await insert(storage, tenant, clock, priority=9)
    clock.set(await storage.database_now())
    claimed = await storage.job_claim(worker_id="gone", limit=2, lease_ttl_s=60, now=clock.now())
    assert len(claimed) == 2
    await poke(storage, "jobs", poison.id, **poisons(storage)[kind])
    before = poisoned_count("reaper")
    caplog.set_level(logging.INFO)

    reaped = await runtime.reaper().reap_once(now=clock.advance(61))
    assert reaped.reaped.requeued == [healthy.id]
    assert reaped.reaped.failed == reaped.reaped.poisoned == [poison.id]
    assert_failed_alone(await storage.job_get(job_id=poison.id))
    assert poisoned_count("reaper") == before + 1
    assert [r.job_id for r in poison_logs(caplog, "reaper")] == [poison.id]  # type: ignore[attr-defined]
    events = await storage.job_events(job_id=poison.id)
    assert (events[-1].actor, events[-1].reason) == ("reaper", "poison_job")


# -- reconciler --------------------------------------------------------------------------------


async def test_reconciler_fails_a_poison_job_alone_and_settles_the_rest(
    storage: Storage, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    tenant = await make_tenant(storage)
    rig = make_rig(storage, clock, tenant)
    poison = await rig.start(sim={"latency_s": 1})
    healthy = await rig.start(sim={"latency_s": 1})
    assert poison.provider_job_id and healthy.provider_job_id
    await poke(storage, "jobs", poison.id, deadline_at=far_future(storage))
    before = poisoned_count("reconciler")
    caplog.set_level(logging.INFO)

    await rig.sweep_at(DUE_S)
    assert_failed_alone(await rig.get(poison.id))
    assert (await rig.get(healthy.id)).state is JobState.SUCCEEDED
    assert poisoned_count("reconciler") == before + 1
    assert [r.job_id for r in poison_logs(caplog, "reconciler")] == [poison.id]  # type: ignore[attr-defined]


async def test_reconciler_fails_a_job_whose_handling_raises(
    storage: Storage,
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tenant = await make_tenant(storage)
    rig = make_rig(storage, clock, tenant)
    poison = await rig.start(sim={"latency_s": 1})
    healthy = await rig.start(sim={"latency_s": 1})
    real_retrieve = rig.provider.retrieve

    async def retrieve(ref: Any) -> Any:
        if ref.job_id == poison.id:
            raise RuntimeError("a bug")
        return await real_retrieve(ref)

    monkeypatch.setattr(rig.provider, "retrieve", retrieve)
    caplog.set_level(logging.INFO)
    await rig.sweep_at(DUE_S)
    assert (await rig.get(healthy.id)).state is JobState.SUCCEEDED
    for _ in range(POISON_AFTER_FAILURES - 1):  # retried with backoff first: it may be passing
        assert (await rig.get(poison.id)).state is JobState.RUNNING
        await rig.sweep_at(600)
    assert_failed_alone(await rig.get(poison.id))
    assert (await rig.get(healthy.id)).state is JobState.SUCCEEDED
    [record] = poison_logs(caplog, "reconciler")
    assert "RuntimeError" in record.traceback  # type: ignore[attr-defined]


# -- dispatcher --------------------------------------------------------------------------------


async def test_dispatcher_fails_a_poison_delivery_alone_and_sends_the_rest(
    storage: Storage, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    from jobgate.testing.receiver import WebhookReceiver

    tenant = await make_tenant(storage)
    with WebhookReceiver() as receiver:
        broken = await make_endpoint(storage, tenant, clock, url=receiver.url)
        fine = await make_endpoint(storage, tenant, clock, url=receiver.url)
        # A secret that is not base64: nothing can be signed with it.
        await poke(storage, "webhook_endpoints", broken.id, secret="'whsec_%%%not-base64'")
        job = await finish_job(storage, clock, tenant)
        dispatcher = Dispatcher(storage=storage, settings=dev_settings(), clock=clock)
        before = poisoned_count("dispatcher")
        caplog.set_level(logging.INFO)
        try:
            tally = await dispatcher.deliver_once(now=clock.now())
        finally:
            await dispatcher.aclose()
        assert (tally.claimed, tally.succeeded, tally.failed) == (2, 1, 1)
        assert receiver.count == 1
    rows = {row.endpoint_id: row for row in await storage.outbox_for_job(job_id=job.id)}
    assert rows[fine.id].state == "succeeded"
    assert rows[broken.id].state == "failed"  # for good: never claimed again
    assert (rows[broken.id].last_error or "").startswith("poison_delivery")
    assert poisoned_count("dispatcher") == before + 1
    assert (await dispatcher.deliver_once(now=clock.advance(86_400))).claimed == 0


REFUSED = "a value the database refuses"


def refuse_results_naming(
    storage: Storage, method: str, monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    """`storage.<method>` raises as a database that refuses a value would (not an outage) for
    any verdict whose result carries `text`. Both stores hold every value a provider sends
    today (NUL escaped, lone surrogates replaced), so the refusal is staged."""
    real = getattr(storage, method)

    async def refusing(**kwargs: Any) -> Any:
        if text in repr(kwargs):
            raise errors.StorageError(f"{method}: the database refused a value")
        return await real(**kwargs)

    monkeypatch.setattr(storage, method, refusing)


async def test_a_verdict_the_database_refuses_fails_alone_not_its_batch(
    runtime: Runtime, clock: FakeClock, scripted: ScriptedProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A verdict the database refuses used to sink every verdict written in the same
    statement: it is written alone, replaced by a poison verdict, and the others stand."""
    storage = runtime.storage
    refuse_results_naming(storage, "job_finish_many", monkeypatch, REFUSED)
    tenant = await make_tenant(storage)
    scripted.script.extend([Succeed({"text": REFUSED}), Succeed({"ok": True})])
    poison = await insert(storage, tenant, clock, provider="scripted", priority=0)
    healthy = await insert(storage, tenant, clock, provider="scripted", priority=9)
    done = {job.id: job for job in await runtime.worker().run_once() if job is not None}
    assert done[healthy.id].state is JobState.SUCCEEDED
    assert_failed_alone(done[poison.id])
    assert "could not be stored" in (done[poison.id].error or {})["message"]


@pytest.mark.parametrize("text", ["a\u0000b", "a\ud800b", "\udfff\ud83d"])
async def test_a_result_with_text_no_column_holds_is_stored(
    runtime: Runtime, clock: FakeClock, scripted: ScriptedProvider, text: str
) -> None:
    """A NUL comes back exactly; a lone surrogate (a provider's JSON may escape one, and
    Python decodes it as it is) cannot be written as UTF-8 and reads back as U+FFFD."""
    storage = runtime.storage
    tenant = await make_tenant(storage)
    scripted.script.append(Succeed({"text": text, text: [text]}))
    job = await insert(storage, tenant, clock, provider="scripted")
    [done] = await runtime.worker().run_once()
    assert done is not None and done.state is JobState.SUCCEEDED
    stored = text_escape._without_surrogates(text)
    assert done.result == {"text": stored, stored: [stored]}
    read = await storage.job_get(job_id=job.id)
    assert read is not None and read.result == done.result


async def test_reconciler_fails_a_result_the_database_refuses(
    storage: Storage, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A provider result the database refuses used to be retried at every claim forever; now
    it is retried a few times, then the job fails alone."""
    tenant = await make_tenant(storage)
    rig = make_rig(storage, clock, tenant)
    poison = await rig.start(sim={"latency_s": 1})
    healthy = await rig.start(sim={"latency_s": 1})
    real_retrieve = rig.provider.retrieve
    refuse_results_naming(storage, "job_settle", monkeypatch, REFUSED)

    async def retrieve(ref: Any) -> Any:
        snapshot = await real_retrieve(ref)
        if ref.job_id != poison.id or snapshot.result is None:
            return snapshot
        body = {**snapshot.result.body, "note": REFUSED}
        return dataclasses.replace(snapshot, result=dataclasses.replace(snapshot.result, body=body))

    monkeypatch.setattr(rig.provider, "retrieve", retrieve)
    await rig.sweep_at(DUE_S)
    assert (await rig.get(healthy.id)).state is JobState.SUCCEEDED
    for _ in range(POISON_AFTER_FAILURES - 1):
        assert (await rig.get(poison.id)).state is JobState.RUNNING
        await rig.sweep_at(600)
    assert_failed_alone(await rig.get(poison.id))
