"""`waiting` on GET /v1/jobs/{id} and GET /v1/jobs, on both backends: each reason the claim can
have for passing a queued job over is shown as the claim sees it (a schedule, a pause, no live
worker, a budget, an open breaker, a rate limit, a tenant cap, a key cap, its turn), and a job
nothing holds says null."""

from __future__ import annotations

from typing import Any

import pytest

from jobgate.config import Settings
from jobgate.domain import waiting
from jobgate.process.runtime import Runtime
from jobgate.storage.protocol import Storage
from jobgate.testing import FakeClock
from tests import waiting_scenarios as held
from tests.api_server import Api


@pytest.fixture
def runtime(storage: Storage, settings: Settings, clock: FakeClock) -> Runtime:
    return held.limited_runtime(storage, settings, clock)


async def waiting_of(found: held.Held) -> dict[str, Any]:
    view = await found.tenant.read(found.job_id)
    assert view["status"] == "queued"
    shown: dict[str, Any] = view["waiting"]
    assert shown is not None, view
    assert shown["reason"] == "queue" or view["note"] == shown["detail"]
    return shown


def test_every_reason_has_a_scenario() -> None:
    assert tuple(held.SCENARIOS) == waiting.REASONS


@pytest.mark.parametrize("reason", waiting.REASONS)
async def test_each_reason_is_shown_on_the_job_and_in_the_list(
    api: Api, clock: FakeClock, reason: str
) -> None:
    found = await held.SCENARIOS[reason](api, clock)
    shown = await waiting_of(found)
    assert shown["reason"] == reason
    page = await api.http.get("/v1/jobs", headers=found.tenant.headers)
    listed = {job["id"]: job["waiting"] for job in page.json()["data"]}[found.job_id]
    assert listed["reason"] == reason
    if shown["until"] is None:
        assert listed == shown
    else:  # read again a moment later (PostgreSQL's clock moves on: a second either side)
        assert abs(listed["until"] - shown["until"]) <= 1


async def test_a_job_first_in_line_waits_for_nothing_the_next_for_its_turn(api: Api) -> None:
    acme = await held.tenant(api)
    first, second = await acme.submit(), await acme.submit()
    view = await acme.read(first)
    assert view["waiting"] is None and view["queue_position"] == 1 and "note" not in view
    assert view["queue_position_exact"] is True
    behind = await waiting_of(held.Held("queue", acme, second))
    assert behind["reason"] == "queue" and behind["until"] is None
    assert "1 job of its tenant is ahead" in behind["detail"]
    listed = (await api.http.get("/v1/jobs", headers=acme.headers)).json()["data"]
    assert {job["id"]: job["waiting"] for job in listed} == {first: None, second: behind}


async def test_no_live_worker(api: Api, clock: FakeClock) -> None:
    shown = await waiting_of(await held.no_worker(api, clock))
    assert shown["until"] is None
    assert "no worker has ever run" in shown["detail"] and "jobgate worker" in shown["detail"]


async def test_a_schedule_until_its_run_at(api: Api, clock: FakeClock) -> None:
    found = await held.scheduled(api, clock)
    shown = await waiting_of(found)
    assert shown["until"] == (await found.tenant.read(found.job_id))["run_at"]


async def test_a_pause_names_itself_and_its_reason(api: Api, clock: FakeClock) -> None:
    shown = await waiting_of(await held.paused(api, clock))
    (pause,) = await api.runtime.storage.pause_list()
    assert shown["until"] is None
    assert pause.id in shown["detail"] and "provider incident" in shown["detail"]


async def test_an_exhausted_budget_until_utc_midnight(api: Api, clock: FakeClock) -> None:
    shown = await waiting_of(await held.budget_exhausted(api, clock))
    assert "budget" in shown["detail"] and shown["until"] % 86_400 == 0


async def test_an_open_breaker_until_it_half_opens(api: Api, clock: FakeClock) -> None:
    found = await held.breaker_open(api, clock)
    shown = await waiting_of(found)
    assert "sim" in shown["detail"]
    created = (await found.tenant.read(found.job_id))["created_at"]
    assert created + 100 <= shown["until"] <= created + 7200


async def test_a_rate_limit_keeps_its_phase(api: Api, clock: FakeClock) -> None:
    found = await held.rate_limited(api, clock)
    view = await found.tenant.read(found.job_id)
    assert view["phase"] == "rate_limited" and view["waiting"]["until"] is not None
    assert "rate limit of sim" in view["waiting"]["detail"]


async def test_a_tenant_cap_says_how_many_run(api: Api, clock: FakeClock) -> None:
    shown = await waiting_of(await held.tenant_cap(api, clock))
    assert shown["until"] is None
    assert "runs 1 jobs" in shown["detail"] and "max_running is 1" in shown["detail"]


async def test_a_key_cap_names_the_key_and_spares_the_others(api: Api, clock: FakeClock) -> None:
    found = await held.key_cap(api, clock)
    assert "'user-7'" in (await waiting_of(found))["detail"]
    other = await found.tenant.submit(concurrency_key="user-8")
    assert (await found.tenant.read(other))["waiting"]["reason"] == "queue"  # its key has room


@pytest.mark.parametrize("limit", list(held.KEY_SCENARIOS))
async def test_a_limit_per_key_names_itself_and_the_key_and_spares_the_others(
    api: Api, clock: FakeClock, limit: str
) -> None:
    found = await held.KEY_SCENARIOS[limit](api, clock)
    shown = await waiting_of(found)
    assert shown["reason"] == found.reason
    assert limit in shown["detail"] and "'user-7'" in shown["detail"]
    assert shown["until"] is not None
    if found.reason == "budget_exhausted":
        assert shown["until"] % 86_400 == 0  # UTC midnight
    else:
        created = (await found.tenant.read(found.job_id))["created_at"]
        assert created < shown["until"] <= created + 61  # one start a minute
    page = await api.http.get("/v1/jobs", headers=found.tenant.headers)
    listed = {job["id"]: job["waiting"] for job in page.json()["data"]}[found.job_id]
    assert listed["reason"] == found.reason and limit in listed["detail"]
    other = await found.tenant.submit(concurrency_key="user-8")
    unkeyed = await found.tenant.submit()
    for job_id in (other, unkeyed):
        assert (await found.tenant.read(job_id))["waiting"]["reason"] == "queue"


async def test_the_first_reason_the_claim_asks_wins(api: Api, clock: FakeClock) -> None:
    found = await held.scheduled(api, clock)
    await held.operator_pause(api, tenant="acme")
    assert (await waiting_of(found))["reason"] == "scheduled"  # and paused too
    (pause,) = await api.runtime.storage.pause_list()
    await api.runtime.storage.breaker_open(provider="sim", open_s=120, opened_by="worker:x")
    await api.runtime.storage.pause_delete(pause_id=pause.id)
    clock.advance(1)  # the shared breakers are read at most once a second, as a worker does
    unscheduled = await found.tenant.submit()
    assert (await found.tenant.read(unscheduled))["waiting"]["reason"] == "breaker_open"


async def test_a_queued_jobs_status_read_stays_one_statement(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The status read learns the pause and its time with the job (Storage.job_status): a
    second read only for a tenant whose caps need its held slots counted."""
    acme = await held.tenant(api)
    job_id = await acme.submit()
    storage = api.runtime.storage
    extra: list[object] = []
    read_facts = storage.job_wait_facts

    async def counted(**kwargs: Any) -> Any:
        extra.append(kwargs)
        return await read_facts(**kwargs)

    monkeypatch.setattr(storage, "job_wait_facts", counted)
    assert (await acme.read(job_id))["waiting"] is None
    assert extra == []
    await held.limit(api, "acme", max_running=5)
    assert (await acme.read(job_id))["waiting"] is None
    assert len(extra) == 1


async def test_a_page_of_jobs_reads_every_keys_rate_limit_at_once(
    api: Api, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    found = await held.rpm_per_key(api, clock)
    for key in ("user-7", "user-8", "user-9"):
        await found.tenant.submit(concurrency_key=key)
    storage = api.runtime.storage
    reads: list[int] = []
    read_waits = storage.rate_limit_waits

    async def counted(**kwargs: Any) -> Any:
        reads.append(len(kwargs["buckets"]))
        return await read_waits(**kwargs)

    monkeypatch.setattr(storage, "rate_limit_waits", counted)
    page = (await api.http.get("/v1/jobs", headers=found.tenant.headers)).json()["data"]
    held_by_rate = [job for job in page if (job["waiting"] or {}).get("reason") == "rate_limited"]
    assert {job["id"] for job in held_by_rate} >= {found.job_id}
    assert reads == [3]  # user-7, user-8, user-9: one read of their three buckets
