"""Chat jobs of one tenant on the scripted provider, as the worker's tests submit them, and the
tasks the worker runs their calls in."""

from __future__ import annotations

import asyncio
import dataclasses

from jobgate.process.runtime import Runtime
from jobgate.services.jobs import SubmitSpec

CHAT = "/v1/chat/completions"
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@dataclasses.dataclass(frozen=True, slots=True)
class ScriptedTenant:
    """A tenant of `runtime` whose every job is one chat call to the `scripted` provider."""

    runtime: Runtime
    id: str

    @classmethod
    async def create(cls, runtime: Runtime, name: str = "acme") -> ScriptedTenant:
        return cls(runtime, (await runtime.tenants.create(name)).tenant.id)

    async def submit(self) -> str:
        """Submit one job; answers its id."""
        spec = SubmitSpec(endpoint=CHAT, body=BODY, provider="scripted")
        outcome = await self.runtime.jobs.submit(tenant_id=self.id, spec=spec)
        return outcome.job.id

    async def submit_jobs(self, count: int) -> list[str]:
        """Submit `count` jobs, one after the other; answers their ids in order."""
        return [await self.submit() for _ in range(count)]


def call_tasks() -> list[str]:
    """The names of the running tasks that hold a job's call: `job <id>` (the worker names a
    job's task so); `call <id>` would be a call task beside it, which the worker never makes."""
    return sorted(
        task.get_name()
        for task in asyncio.all_tasks()
        if task.get_name().startswith(("job ", "call "))
    )
