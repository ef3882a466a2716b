"""Submit paths that bypass the HTTP models (bulk and batch submits, the CLI build a
SubmitSpec themselves) meet the same ranges: nothing unschedulable is stored."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from jobgate import errors
from jobgate.process.runtime import Runtime
from jobgate.services import jobs
from jobgate.services.jobs import SubmitSpec

CHAT = "/v1/chat/completions"
SPEC = SubmitSpec(
    endpoint=CHAT, body={"model": "sim-echo", "messages": [{"role": "user", "content": "hi"}]}
)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("execution_timeout_s", 3e11),
        ("execution_timeout_s", 1e300),
        ("start_timeout_s", 1e300),
        ("start_timeout_s", float("nan")),
        ("priority", 10),
        ("max_attempts", 10**6),
        ("body", {"model": "sim-echo", "messages": [], "seed": 2**64}),
        ("metadata", {"k": "a\x00b"}),
    ],
)
async def test_out_of_range_specs_are_refused_before_storage(
    runtime: Runtime, field: str, value: Any
) -> None:
    tenant = (await runtime.tenants.create("acme")).tenant
    spec = dataclasses.replace(SPEC, **{field: value})
    with pytest.raises(errors.InvalidRequest) as caught:
        await runtime.jobs.submit(tenant_id=tenant.id, spec=spec)
    assert caught.value.param is not None and caught.value.param.startswith(field)
    with pytest.raises(errors.InvalidRequest):
        await runtime.jobs.submit_many(tenant_id=tenant.id, specs=[SPEC, spec])
    assert await runtime.storage.job_list(tenant_id=tenant.id, limit=5) == []


@pytest.mark.parametrize("bad_at", [0, jobs.FIRST_CHUNK, jobs.FIRST_CHUNK + jobs.CHUNK + 7])
async def test_a_bad_item_anywhere_in_a_large_batch_stores_none_of_it(
    runtime: Runtime, bad_at: int
) -> None:
    """A batch far from the queue bounds is inserted chunk by chunk while the next chunk is
    prepared (job_insert reading its chunks lazily): an item refused in the first chunk, the
    second or a later one raises the same error, and the chunks already inserted are rolled
    back."""
    tenant = (await runtime.tenants.create("acme")).tenant
    specs = [SPEC] * (jobs.FIRST_CHUNK + 2 * jobs.CHUNK)
    specs[bad_at] = dataclasses.replace(SPEC, priority=10)
    with pytest.raises(errors.InvalidRequest) as caught:
        await runtime.jobs.submit_many(tenant_id=tenant.id, specs=specs)
    assert caught.value.param == "priority"
    assert await runtime.storage.job_list(tenant_id=tenant.id, limit=5) == []
    specs[bad_at] = SPEC
    stored = await runtime.jobs.submit_many(tenant_id=tenant.id, specs=specs)
    assert len({job.id for job in stored}) == len(specs)
