"""The asynchronous client: drives the plans of `_plans.py` with httpx.AsyncClient and
asyncio.sleep. Journal writes run in a thread."""

from __future__ import annotations

import asyncio
import builtins
import inspect
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from types import TracebackType
from typing import Any, TypeVar, Unpack

import httpx

from jobgate.client import _steps, bulk
from jobgate.client._base import (
    DEFAULT_TOKEN_SCOPES,
    DEFAULT_TOKEN_TTL_S,
    IterJobsOptions,
    ListOptions,
    OnChange,
    SubmitOptions,
)
from jobgate.client._plans import Plans
from jobgate.client.journal import Operation
from jobgate.client.models import EventPage, Job, JobEvent, JobPage, JobToken, OutputDelta

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
        """The job as it stands now (see Client.get)."""
        return await self._run(self._plan_job("GET", self._job_path(job_id)))

    async def wait(
        self, job_id: str, *, timeout_s: float | None = None, on_change: OnChange = None
    ) -> Job:
        """Wait until the job is terminal and return it (see Client.wait); `on_change` may
        return an awaitable, which is awaited."""
        return await self._run(self._plan_wait(job_id, timeout_s, on_change))

    async def cancel(self, job_id: str) -> Job:
        """Cancel (idempotent; see Client.cancel)."""
        return await self._run(self._plan_job("POST", self._job_path(job_id, "/cancel")))

    async def create_job_token(
        self,
        job_id: str,
        *,
        ttl_s: int = DEFAULT_TOKEN_TTL_S,
        scopes: Iterable[str] = DEFAULT_TOKEN_SCOPES,
    ) -> JobToken:
        """A job token for one job (see Client.create_job_token)."""
        return await self._run(self._plan_create_job_token(job_id, ttl_s, scopes))

    async def delete(self, job_id: str) -> Job:
        """Cancel if still live, then purge the job's data (see Client.delete)."""
        return await self._run(self._plan_job("DELETE", self._job_path(job_id)))

    async def retry(self, job_id: str) -> Job:
        """Redrive a dead-lettered job (see Client.retry)."""
        path = self._job_path(job_id, "/retry")
        return await self._run(self._plan_job("POST", path, idempotent=False))

    async def list(self, **options: Unpack[ListOptions]) -> JobPage:
        """One page of jobs, newest first (see Client.list for the keywords)."""
        return await self._run(self._plan_list(options))

    def iter_jobs(self, **options: Unpack[IterJobsOptions]) -> AsyncIterator[Job]:
        """`async for` every matching job, newest first (see Client.iter_jobs)."""
        return self._iterate(_steps.Run(self._plan_iter_jobs(options)))

    async def event_log(
        self, job_id: str, *, after: int = 0, limit: int | None = None
    ) -> EventPage:
        """One page of the job's transition log (see Client.event_log)."""
        return await self._run(self._plan_event_log(job_id, after, limit))

    def events(
        self, job_id: str, *, after: int = 0, max_reconnects: int = 8
    ) -> AsyncIterator[JobEvent]:
        """Follow the job's events live (SSE) until it is terminal; see Client.events."""
        return self._iterate(_steps.Run(self._plan_events(job_id, after, max_reconnects)))

    def stream(
        self, job_id: str, *, starting_after: int = 0, max_reconnects: int = 8
    ) -> AsyncIterator[OutputDelta]:
        """Follow the job's output live (SSE) until it is terminal; see Client.stream."""
        return self._iterate(_steps.Run(self._plan_stream(job_id, starting_after, max_reconnects)))

    # -- journal ------------------------------------------------------------------------

    async def resume(self) -> builtins.list[Operation]:
        """Settle what the journal holds unfinished for this server (see Client.resume)."""
        return await self._run(self._plan_resume())

    # -- plumbing -----------------------------------------------------------------------

    async def _run(self, plan: _steps.Plan[T]) -> T:
        """Drive a plan that emits nothing to its result."""
        run = _steps.Run(plan)
        async for _ in self._iterate(run):
            raise AssertionError("a call's plan emitted an item")
        return run.result

    async def _iterate(self, run: _steps.Run[Any]) -> AsyncIterator[Any]:
        """Drive a plan, yielding what it emits."""
        try:
            for step in run:
                if isinstance(step, _steps.Emit):
                    yield step.item
                else:
                    await self._perform(step, run)
        finally:
            if run.streamed is not None:
                await run.streamed.aclose()

    async def _perform(self, step: _steps.Step, run: _steps.Run[Any]) -> None:
        """Do one I/O step and give `run` its outcome; journal calls run in a thread."""
        try:
            if isinstance(step, _steps.Send) and step.stream:
                if run.streamed is not None:
                    await run.streamed.aclose()
                run.streamed = await self._http.send(step.request, stream=True)
                run.lines = run.streamed.aiter_lines()
                run.answer(run.streamed)
            elif isinstance(step, _steps.Send):
                run.answer(await self._http.send(step.request))
            elif isinstance(step, _steps.ReadBody):
                await step.response.aread()
            elif isinstance(step, _steps.NextLine):
                run.answer(None if run.lines is None else await anext(run.lines, None))
            elif isinstance(step, _steps.Sleep):
                await self._sleep(step.seconds)
            elif isinstance(step, _steps.Clock):
                run.answer(self._monotonic())
            elif isinstance(step, _steps.Blocking):
                run.answer(await asyncio.to_thread(step.call))
            elif isinstance(step, _steps.Notify):
                notified = step.callback(step.job)
                if inspect.isawaitable(notified):
                    await notified
        except httpx.TransportError as exc:
            run.fail(exc)
