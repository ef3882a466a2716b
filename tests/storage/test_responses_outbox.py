"""The outbox rows the triggers write for /v1/responses jobs (migration 0005): OpenAI's event
types, `response.incomplete` read from the stored result, on both backends; and the database's
event type function agrees with jobgate.domain.events for every combination."""

from __future__ import annotations

import itertools
from typing import Any

import asyncpg
import pytest

from jobgate import ids
from jobgate.domain import events
from jobgate.domain.states import JobState
from jobgate.storage.protocol import Storage
from jobgate.testing import FakeClock
from tests.storage.helpers import make_tenant
from tests.storage.webhook_helpers import finish_job, make_endpoint

RESPONSE_BODY = {"model": "sim-echo", "input": "hi"}


@pytest.mark.parametrize(
    ("state", "result", "expected"),
    [
        (JobState.SUCCEEDED, {"object": "response", "status": "completed"}, "response.completed"),
        (JobState.SUCCEEDED, {"object": "response", "status": "incomplete"}, "response.incomplete"),
        (JobState.SUCCEEDED, {"unexpected": ["shape"]}, "response.completed"),
        (JobState.FAILED, {"status": "incomplete"}, "response.failed"),
        (JobState.CANCELLED, None, "response.cancelled"),
    ],
)
async def test_responses_jobs_emit_openai_event_types(
    storage: Storage,
    clock: FakeClock,
    state: JobState,
    result: dict[str, Any] | None,
    expected: str,
) -> None:
    tenant = await make_tenant(storage)
    every = await make_endpoint(storage, tenant, clock)
    only = await make_endpoint(storage, tenant, clock, event_types=(expected,))
    elsewhere = await make_endpoint(storage, tenant, clock, event_types=("job.succeeded",))
    job = await finish_job(
        storage,
        clock,
        tenant,
        state=state,
        result=result or {},
        api="responses",
        id=f"resp_{state}_{expected}",
        endpoint="/v1/responses",
        request=RESPONSE_BODY,
        webhook={"url": "https://j.example/h"},
    )
    rows = await storage.outbox_for_job(job_id=job.id)
    assert sorted((r.event_type, r.target) for r in rows) == sorted(
        [(expected, every.id), (expected, only.id), (expected, "job")]
    )
    assert elsewhere.id not in {r.target for r in rows}
    assert {r.event_id for r in rows} == {ids.event_id(job.id, expected, 0)}


async def test_native_jobs_are_unchanged(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    await make_endpoint(storage, tenant, clock)
    job = await finish_job(storage, clock, tenant, result={"status": "incomplete"})
    [row] = await storage.outbox_for_job(job_id=job.id)
    assert row.event_type == "job.succeeded"


@pytest.mark.postgres
async def test_postgres_event_type_function_agrees_with_the_domain(pg_dsn: str) -> None:
    connection = await asyncpg.connect(pg_dsn)
    try:
        for api, state, status in itertools.product(
            ("jobs", "responses"), list(JobState), (None, "completed", "incomplete", "failed")
        ):
            found = await connection.fetchval(
                "SELECT jobgate_event_type($1::text, $2::text, $3::text)", api, str(state), status
            )
            assert found == events.event_type_for(api, state, status), (api, state, status)
    finally:
        await connection.close()
