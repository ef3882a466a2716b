"""The asynchronous client: drives the plans of `_plans.py` with httpx.AsyncClient and
asyncio.sleep. Journal writes run in a thread."""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import inspect
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Mapping
from types import TracebackType
from typing import Any, TypeVar, Unpack

import httpx

from jobgate.client import bulk
from jobgate.client._base import SubmitOptions
from jobgate.client._plans import Plans
from jobgate.client._steps import (
    Blocking,
    Clock,
    Done,
    Emit,
    NextLine,
    Notify,
    Outcome,
    Plan,
    ReadBody,
    Send,
    Sleep,
)
from jobgate.client.journal import Operation
from jobgate.client.models import EventPage, Job, JobEvent, JobPage, OutputDelta

T = TypeVar("T")


class AsyncClient(Plans[httpx.AsyncClient, httpx.AsyncBaseTransport]):
    """An asyncio client for jobgate's native API: `Client`'s methods, awaited (see `Client`
    for the details of each). `on_change` may be a coroutine function."""

    def _new_http(self, transport: httpx.AsyncBaseTransport | None) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=transport, **self._http_options())

    async def close(self) -> None:
        await self._http.aclose()
        if self.journal is not None and self._owns_journal:
            self.journal.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # Seams for tests that run the wait loop on a fake clock.
    async def _sleep(self, seconds: float) -> None:
        if seconds > 0:
            await asyncio.sleep(seconds)

    def _monotonic(self) -> float:
        return time.monotonic()

    # -- jobs ---------------------------------------------------------------------------

    async def submit(
        self, endpoint: str, body: Mapping[str, Any], **options: Unpack[SubmitOptions]
    ) -> Job:
        """Submit a job (see Client.submit)."""
        return await self._run(self._plan_submit(endpoint, body, options))

    async def submit_many(
        self, items: Iterable[Mapping[str, Any]]
    ) -> builtins.list[bulk.BulkResult]:
        """Submit many jobs through `POST /v1/jobs/bulk`; see Client.submit_many."""
        return await self._run(self._plan_submit_many(items))

    async def get(self, job_id: str) -> Job:
        """The job as it stands now."""
        return await self._run(self._plan_job("GET", self._job_path(job_id)))

    async def wait(
        self,
        job_id: str,
        *,
        timeout_s: float | None = None,
        on_change: Callable[[Job], object] | None = None,
    ) -> Job:
        """Wait until the job is terminal and return it (see Client.wait); `on_change` may
        return an awaitable, which is awaited."""
        return await self._run(self._plan_wait(job_id, timeout_s, on_change))

    async def cancel(self, job_id: str) -> Job:
        """Cancel (idempotent; see Client.cancel)."""
        return await self._run(self._plan_job("POST", self._job_path(job_id, "/cancel")))

    async def delete(self, job_id: str) -> Job:
        """Cancel if still live, then purge the job's input and result (the record stays)."""
        return await self._run(self._plan_job("DELETE", self._job_path(job_id)))

    async def retry(self, job_id: str) -> Job:
        """Redrive a dead-lettered job (NotDeadLetteredError for any other)."""
        path = self._job_path(job_id, "/retry")
        return await self._run(self._plan_job("POST", path, idempotent=False))

    async def list(
        self,
        *,
        status: str | Iterable[str] | None = None,
        dead_lettered: bool | None = None,
        after: str | None = None,
        limit: int | None = None,
    ) -> JobPage:
        """One page of jobs, newest first."""
        return await self._run(self._plan_list(status, dead_lettered, after, limit))

    def iter_jobs(
        self,
        *,
        status: str | Iterable[str] | None = None,
        dead_lettered: bool | None = None,
        page_size: int = 100,
    ) -> AsyncIterator[Job]:
        """Every matching job, newest first, fetching pages as it goes."""
        return self._iterate(self._plan_iter_jobs(status, dead_lettered, page_size))

    async def event_log(
        self, job_id: str, *, after: int = 0, limit: int | None = None
    ) -> EventPage:
        """One page of the job's transition log (events with seq > `after`)."""
        return await self._run(self._plan_event_log(job_id, after, limit))

    def events(
        self, job_id: str, *, after: int = 0, max_reconnects: int = 8
    ) -> AsyncIterator[JobEvent]:
        """Follow the job's events live (SSE) until it is terminal; see Client.events."""
        return self._iterate(self._plan_events(job_id, after, max_reconnects))

    def stream(
        self, job_id: str, *, starting_after: int = 0, max_reconnects: int = 8
    ) -> AsyncIterator[OutputDelta]:
        """Follow the job's output live (SSE) until it is terminal; see Client.stream."""
        return self._iterate(self._plan_stream(job_id, starting_after, max_reconnects))

    # -- journal ------------------------------------------------------------------------

    async def resume(self) -> builtins.list[Operation]:
        """Settle what the journal holds unfinished for this server (see Client.resume)."""
        return await self._run(self._plan_resume())

    # -- plumbing -----------------------------------------------------------------------

    async def _run(self, plan: Plan[T]) -> T:
        """Drive a plan that emits nothing to its result."""
        async with contextlib.aclosing(self._drive(plan)) as steps:
            async for step in steps:
                if isinstance(step, Done):
                    return step.value
        raise AssertionError("a plan ended without a result")

    async def _iterate(self, plan: Plan[None]) -> AsyncIterator[Any]:
        """Drive a plan, yielding what it emits."""
        async with contextlib.aclosing(self._drive(plan)) as steps:
            async for step in steps:
                if isinstance(step, Emit):
                    yield step.item

    async def _drive(self, plan: Plan[T]) -> AsyncGenerator[Emit | Done[T], None]:
        """Perform each step `plan` asks for; yield its emitted items, then Done."""
        streamed: httpx.Response | None = None
        lines: AsyncIterator[str] | None = None
        try:
            outcome = Outcome()
            while not isinstance(step := outcome.resume(plan), Done):
                outcome = Outcome()
                try:
                    if isinstance(step, Send) and step.stream:
                        if streamed is not None:
                            await streamed.aclose()
                        streamed = await self._http.send(step.request, stream=True)
                        lines, outcome.value = streamed.aiter_lines(), streamed
                    elif isinstance(step, Send):
                        outcome.value = await self._http.send(step.request)
                    elif isinstance(step, ReadBody):
                        await step.response.aread()
                    elif isinstance(step, NextLine):
                        outcome.value = None if lines is None else await anext(lines, None)
                    elif isinstance(step, Sleep):
                        await self._sleep(step.seconds)
                    elif isinstance(step, Clock):
                        outcome.value = self._monotonic()
                    elif isinstance(step, Blocking):
                        outcome.value = await asyncio.to_thread(step.call)
                    elif isinstance(step, Notify):
                        notified = step.callback(step.job)
                        if inspect.isawaitable(notified):
                            await notified
                    else:
                        yield step
                except httpx.TransportError as exc:
                    outcome.error = exc
            yield step
        finally:
            if streamed is not None:
                await streamed.aclose()
