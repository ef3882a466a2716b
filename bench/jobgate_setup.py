"""jobgate through its own services, in this process: tenants, keys and queued no-op jobs."""

from __future__ import annotations

import asyncio
from typing import Any

from jobgate.config import Settings
from jobgate.process.roles import freeze_start_up_heap
from jobgate.process.runtime import Runtime
from jobgate.services.jobs import SubmitSpec

ENDPOINT = "/v1/chat/completions"
# A no-op job: the built-in `sim` provider with zero latency answers at once.
NOOP_BODY: dict[str, Any] = {
    "model": "sim-echo",
    "messages": [{"role": "user", "content": "noop"}],
}
NOOP_SUBMIT: dict[str, Any] = {"endpoint": ENDPOINT, "body": NOOP_BODY}


async def open_runtime(database_url: str, **settings: Any) -> Runtime:
    """An open runtime in this process, its start-up heap frozen as every `jobgate` process
    freezes its own (process.roles): the in-process figures are then an API process's, not
    those of a process whose full garbage collections walk every imported module."""
    runtime = Runtime(Settings(database_url=database_url, **settings))
    await runtime.open(migrate=True)
    freeze_start_up_heap()
    return runtime


async def new_tenant(runtime: Runtime, name: str = "bench") -> tuple[str, str]:
    """A tenant and its API key: (tenant_id, api_key)."""
    issued = await runtime.tenants.create(name)
    return issued.tenant.id, issued.api_key


async def submit_each(
    runtime: Runtime, tenant_id: str, count: int, *, concurrency: int = 64
) -> list[str]:
    """Submit `count` no-op jobs through JobService.submit (the API's own path, minus HTTP),
    `concurrency` at a time; returns their ids in submit order."""
    ids: list[str] = [""] * count
    cursor = iter(range(count))
    spec = SubmitSpec(endpoint=ENDPOINT, body=NOOP_BODY)

    async def caller() -> None:
        for index in cursor:
            outcome = await runtime.jobs.submit(tenant_id=tenant_id, spec=spec)
            ids[index] = outcome.job.id

    await asyncio.gather(*(caller() for _ in range(max(1, min(concurrency, count)))))
    return ids


async def submit_batches(runtime: Runtime, tenant_id: str, count: int, *, batch: int) -> list[str]:
    """Submit `count` no-op jobs `batch` at a time through JobService.submit_many (the batched
    enqueue, one transaction per batch); returns their ids in submit order."""
    spec = SubmitSpec(endpoint=ENDPOINT, body=NOOP_BODY)
    ids: list[str] = []
    for start in range(0, count, batch):
        size = min(batch, count - start)
        stored = await runtime.jobs.submit_many(tenant_id=tenant_id, specs=[spec] * size)
        ids.extend(job.id for job in stored)
    return ids
