"""A bulk submit without keys or webhooks, far from the queue bounds, is stored chunk by chunk
while its next items are prepared (job_insert reading its chunks lazily): each refused item
still answers in its own slot wherever its chunk, the others are stored, and every answer is
in call order."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import pytest

from jobgate import errors
from jobgate.process.runtime import Runtime
from jobgate.services import jobs, submit_many
from jobgate.services.jobs import SubmitSpec
from jobgate.storage.records import SubmitOutcome
from tests.storage.helpers import queued

pytestmark = pytest.mark.asyncio

SPEC = SubmitSpec(
    endpoint="/v1/chat/completions",
    body={"model": "sim-echo", "messages": [{"role": "user", "content": "hi"}]},
)


def _spying(runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """How each insert from now on is given its jobs: "streamed" (chunks read lazily) or
    "together" (every chunk made before the call)."""
    called: list[str] = []
    real = runtime.storage.job_insert

    async def spy(**kwargs: Any) -> Any:
        called.append("together" if isinstance(kwargs["chunks"], Sequence) else "streamed")
        return await real(**kwargs)

    monkeypatch.setattr(runtime.storage, "job_insert", spy)
    return called


async def test_refused_items_in_any_chunk_answer_alone_and_the_rest_is_stored(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant = (await runtime.tenants.create("acme")).tenant
    count = jobs.FIRST_CHUNK + 2 * jobs.CHUNK
    bad = {0, jobs.FIRST_CHUNK + 3, count - 1}
    items = [
        submit_many.SubmitManyItem(
            dataclasses.replace(SPEC, priority=10 if n in bad else n % 10, metadata={"n": n})
        )
        for n in range(count)
    ]
    items[7] = submit_many.SubmitManyItem(
        None, refused=errors.InvalidRequest("jobs[7] must be an object")
    )
    called = _spying(runtime, monkeypatch)
    results = await submit_many.submit_bulk(runtime.jobs, tenant_id=tenant.id, items=items)
    assert called == ["streamed"]
    assert len(results) == count
    for n, result in enumerate(results):
        if n in bad or n == 7:
            assert isinstance(result, errors.InvalidRequest)
        else:
            assert isinstance(result, SubmitOutcome) and result.job.metadata == {"n": n}
            assert await runtime.storage.job_get(job_id=result.job.id) == result.job
    assert await queued(runtime.storage, tenant.id) == count - len(bad) - 1


async def test_keys_or_webhooks_take_the_one_insert_path(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant = (await runtime.tenants.create("acme")).tenant
    called = _spying(runtime, monkeypatch)
    keyed = [
        submit_many.SubmitManyItem(SPEC, idempotency_key="k1"),
        submit_many.SubmitManyItem(SPEC),
    ]
    await submit_many.submit_bulk(runtime.jobs, tenant_id=tenant.id, items=keyed)
    assert called == ["together"]


async def test_a_call_whose_every_item_is_refused_stores_nothing(runtime: Runtime) -> None:
    tenant = (await runtime.tenants.create("acme")).tenant
    items = [submit_many.SubmitManyItem(dataclasses.replace(SPEC, priority=10))] * 3
    results = await submit_many.submit_bulk(runtime.jobs, tenant_id=tenant.id, items=items)
    assert all(isinstance(r, errors.InvalidRequest) for r in results)
    assert await queued(runtime.storage, tenant.id) == 0
