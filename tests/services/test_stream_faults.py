"""Streaming jobs against a fake upstream sending the providers' real payloads, on both stores:
whatever text a model streams is stored exactly, and a storage error that retrying cannot mend
fails the attempt instead of holding the job forever."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from jobgate import errors
from jobgate.config import ProviderConfig, Settings
from jobgate.domain.job import Job, Lease
from jobgate.domain.states import JobState
from jobgate.process.runtime import Runtime
from jobgate.providers.base import Provider
from jobgate.providers.registry import ProviderRegistry
from jobgate.providers.streaming import output_text
from jobgate.services.jobs import SubmitSpec
from jobgate.storage.protocol import Storage
from jobgate.storage.records import OutputChunk
from jobgate.testing import FakeClock, SequentialIds
from tests.providers import upstreams
from tests.providers.upstreams import Upstream

pytestmark = pytest.mark.asyncio
CHAT = "/v1/chat/completions"
RUN_S = 20.0  # a run that takes longer is one that never ends


def runtime_for(
    storage: Storage, settings: Settings, clock: FakeClock, provider: Provider
) -> Runtime:
    registry = ProviderRegistry(
        {provider.name: provider},
        configs={provider.name: ProviderConfig(kind=provider.kind)},
        default=provider.name,
        clock=clock,
    )
    return Runtime(settings, storage=storage, clock=clock, ids=SequentialIds(), providers=registry)


async def submit(runtime: Runtime, body: dict[str, Any] | None = None, **spec: Any) -> str:
    owner = (await runtime.tenants.create("acme")).tenant
    request = body or {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "hi"}]}
    outcome = await runtime.jobs.submit(
        tenant_id=owner.id, spec=SubmitSpec(endpoint=CHAT, body=request, stream=True, **spec)
    )
    return outcome.job.id


async def run_once(runtime: Runtime, clock: FakeClock) -> Job:
    """Run the next claimable job to its verdict (a retry is claimable after its backoff: on
    the fake clock for SQLite, on the database's own for PostgreSQL)."""
    async with asyncio.timeout(RUN_S):
        while True:
            ran = await runtime.worker().run_once()
            if ran:
                [done] = ran
                assert done is not None
                return done
            clock.advance(0.1)
            await asyncio.sleep(0.01)


async def streamed(storage: Storage, job_id: str) -> str:
    return "".join(chunk.text for chunk in await storage.job_output_read(job_id=job_id))


# -- any text, stored exactly ------------------------------------------------------------------


async def test_a_nul_the_model_streams_is_stored_exactly(
    storage: Storage, settings: Settings, clock: FakeClock
) -> None:
    pieces = ["nul \x00 here", " and \uffff0 there", "\x00"]
    upstream = Upstream(upstreams.stream(upstreams.openai_sse(upstreams.chat_text(*pieces))))
    runtime = runtime_for(storage, settings, clock, upstream.openai(clock))
    job_id = await submit(runtime)
    done = await run_once(runtime, clock)
    assert done.state is JobState.SUCCEEDED, done.error
    text = "".join(pieces)
    assert output_text(done.result) == text
    assert await streamed(storage, job_id) == text
    job = await runtime.jobs.view(tenant_id=done.tenant_id, job_id=job_id)
    assert output_text(job.result) == text


# -- a storage error a retry cannot mend ---------------------------------------------------------


class RefusingOutput:
    """The storage, except that every output append is refused as no retry would mend (a
    constraint, a value the column cannot hold)."""

    def __init__(self, storage: Storage) -> None:
        self._storage = storage
        self.appends = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._storage, name)

    async def job_output_append(self, *, lease: Lease, text: str, **_: Any) -> OutputChunk:
        self.appends += 1
        raise errors.StorageError("postgres: CheckViolationError: refused")


async def test_an_append_the_database_refuses_fails_the_attempt(
    storage: Storage, settings: Settings, clock: FakeClock
) -> None:
    upstream = Upstream(upstreams.stream(upstreams.openai_sse(upstreams.chat_text("a", "b"))))
    refusing = RefusingOutput(storage)
    runtime = runtime_for(refusing, settings, clock, upstream.openai(clock))
    job_id = await submit(runtime)
    first = await run_once(runtime, clock)
    assert first.state is JobState.QUEUED and first.attempt == 1
    assert first.error is not None and first.error["code"] == "output_not_stored"
    assert refusing.appends == 1  # not retried: it would be refused again
    for _ in range(2):
        last = await run_once(runtime, clock)
    assert last.id == job_id and last.state is JobState.FAILED and last.dead_lettered
    assert last.attempt == settings.max_attempts == 3  # each one counted
    assert last.error is not None and last.error["code"] == "output_not_stored"
    assert last.result is None  # no answer whose output log is missing
