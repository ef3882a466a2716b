"""The synchronous client: drives the plans of `_plans.py` with httpx.Client and time.sleep."""

from __future__ import annotations

import builtins
import time
from collections.abc import Iterable, Iterator, Mapping
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


class Client(Plans[httpx.Client, httpx.BaseTransport]):
    """A client for jobgate's native API.

    `base_url` and `api_key` default to JOBGATE_URL / JOBGATE_API_KEY, then to the key that
    `jobgate serve` saved for that URL. Every request that is safe to repeat is retried on a
    lost connection, 429 and 503 (at most `max_retries` times, full-jitter backoff, never
    sooner than Retry-After). A submit is always safe to repeat: it carries an
    Idempotency-Key (yours, or a fresh operation id). With `journal="ops.db"` every submit is
    recorded before it is sent; `resume()` settles what a crash left unfinished.
    """

    def _new_http(self, transport: httpx.BaseTransport | None) -> httpx.Client:
        return httpx.Client(transport=transport, **self._http_options())

    def close(self) -> None:
        self._http.close()
        if self.journal is not None and self._owns_journal:
            self.journal.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # Seams for tests that run the wait loop on a fake clock.
    def _sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    def _monotonic(self) -> float:
        return time.monotonic()

    # -- jobs ---------------------------------------------------------------------------

    def submit(
        self, endpoint: str, body: Mapping[str, Any], **options: Unpack[SubmitOptions]
    ) -> Job:
        """Submit a job; answers at once with it `queued` (or, with `wait_s` ≤ 60, finished if
        it finished in time). `stream`: the job's output is served live (`stream()`) while it
        runs; with `on_retry="continue"` a retry goes on from the output streamed so far
        where the provider can. Repeating a call with the same `idempotency_key` and body
        answers the same job; with a journal the key is the journaled operation's id. The
        other options (`provider`, `metadata`, `webhook`, `priority`, `max_attempts`,
        `start_timeout_s`, `execution_timeout_s`) are the job's fields of the same names."""
        return self._run(self._plan_submit(endpoint, body, options))

    def submit_many(self, items: Iterable[Mapping[str, Any]]) -> builtins.list[bulk.BulkResult]:
        """Submit many jobs through `POST /v1/jobs/bulk`, 1,000 per call, one transaction per
        call. Each item is a mapping with `endpoint`, `body` and any of submit()'s keyword
        arguments (`idempotency_key` included; one is generated where missing, so a lost
        answer is retried safely). Answers one entry per item, in order: the Job, or the
        APIStatusError that refused that item alone."""
        return self._run(self._plan_submit_many(items))

    def get(self, job_id: str) -> Job:
        """The job as it stands now."""
        return self._run(self._plan_job("GET", self._job_path(job_id)))

    def wait(
        self, job_id: str, *, timeout_s: float | None = None, on_change: OnChange = None
    ) -> Job:
        """Block until the job is terminal and return it; raise WaitTimeout (carrying the last
        job seen) if `timeout_s` passes first. `on_change` is called with each new status seen.
        """
        return self._run(self._plan_wait(job_id, timeout_s, on_change))

    def cancel(self, job_id: str) -> Job:
        """Cancel (idempotent): a queued job is cancelled at once, a running one once its
        worker has stopped the call; a finished job is answered unchanged."""
        return self._run(self._plan_job("POST", self._job_path(job_id, "/cancel")))

    def create_job_token(
        self,
        job_id: str,
        *,
        ttl_s: int = DEFAULT_TOKEN_TTL_S,
        scopes: Iterable[str] = DEFAULT_TOKEN_SCOPES,
    ) -> JobToken:
        """A short-lived token for this job only, to hand to a browser or a phone instead of
        an API key: `scopes` among "read" (get, wait, events), "stream" (the output stream)
        and "cancel"; `ttl_s` seconds of life, at most a day. The server refuses it anywhere
        else, and once it expires or the job is purged. Use it as
        `Client(base_url, token=job_token.token)`, or as `?token=` in a URL."""
        return self._run(self._plan_create_job_token(job_id, ttl_s, scopes))

    def delete(self, job_id: str) -> Job:
        """Cancel if still live, then purge the job's input and result (the record stays)."""
        return self._run(self._plan_job("DELETE", self._job_path(job_id)))

    def retry(self, job_id: str) -> Job:
        """Redrive a dead-lettered job (NotDeadLetteredError for any other)."""
        path = self._job_path(job_id, "/retry")
        return self._run(self._plan_job("POST", path, idempotent=False))

    def list(self, **options: Unpack[ListOptions]) -> JobPage:
        """One page of jobs, newest first. Keywords: `status` (one or several),
        `dead_lettered`, `model`, `provider`, `created_after`, `created_before` (an aware
        datetime or Unix seconds; after inclusive, before exclusive) and `metadata` (pairs
        the job's metadata must all hold) say which jobs, `after` (a job id) and `limit`
        which page."""
        return self._run(self._plan_list(options))

    def iter_jobs(self, **options: Unpack[IterJobsOptions]) -> Iterator[Job]:
        """Every matching job, newest first, fetching pages as it goes. Keywords: the filters
        of list(), `page_size` jobs per request (100)."""
        return self._iterate(_steps.Run(self._plan_iter_jobs(options)))

    def event_log(self, job_id: str, *, after: int = 0, limit: int | None = None) -> EventPage:
        """One page of the job's transition log (events with seq > `after`)."""
        return self._run(self._plan_event_log(job_id, after, limit))

    def events(self, job_id: str, *, after: int = 0, max_reconnects: int = 8) -> Iterator[JobEvent]:
        """Follow the job's events live (SSE) until it is terminal. A dropped stream is resumed
        where it broke (Last-Event-ID), so no event is lost or repeated; `after` starts past a
        sequence number. Gives up after `max_reconnects` failures in a row."""
        return self._iterate(_steps.Run(self._plan_events(job_id, after, max_reconnects)))

    def stream(
        self, job_id: str, *, starting_after: int = 0, max_reconnects: int = 8
    ) -> Iterator[OutputDelta]:
        """Follow the job's output live (SSE) as its worker produces it, until the job is
        terminal; each item is a text delta (an `OutputDelta`, a str). A dropped stream is
        resumed where it broke (Last-Event-ID), so no text is lost or repeated. A delta with
        `reset` True starts a new attempt's text: discard what came before (or, with
        `continued_chars` n, keep its first n characters and skip the delta's first n, which
        repeat them: `text = text[:n] + delta[n:]`). A job submitted
        without `stream=True` gives its whole text as one delta when it finishes. Gives up
        after `max_reconnects` failures in a row."""
        return self._iterate(_steps.Run(self._plan_stream(job_id, starting_after, max_reconnects)))

    # -- journal ------------------------------------------------------------------------

    def resume(self) -> builtins.list[Operation]:
        """Settle what the journal holds unfinished for this server: re-send each submit whose
        outcome is unknown with its original key and body (the server answers the job it
        created, or creates it now: never twice), and refresh the others. Pending submits
        older than the server keeps keys become `stale` instead. Returns the operations
        touched, each with its `job`."""
        return self._run(self._plan_resume())

    # -- plumbing -----------------------------------------------------------------------

    def _request(self, method: str, path: str, **options: Any) -> httpx.Response:
        """One request with the client's retries (`_plan_request`'s keyword arguments)."""
        return self._run(self._plan_request(method, path, **options))

    def _run(self, plan: _steps.Plan[T]) -> T:
        """Drive a plan that emits nothing to its result."""
        run = _steps.Run(plan)
        for _ in self._iterate(run):
            raise AssertionError("a call's plan emitted an item")
        return run.result

    def _iterate(self, run: _steps.Run[Any]) -> Iterator[Any]:
        """Drive a plan, yielding what it emits."""
        try:
            for step in run:
                if isinstance(step, _steps.Emit):
                    yield step.item
                else:
                    self._perform(step, run)
        finally:
            if run.streamed is not None:
                run.streamed.close()

    def _perform(self, step: _steps.Step, run: _steps.Run[Any]) -> None:
        """Do one I/O step and give `run` its outcome."""
        try:
            if isinstance(step, _steps.Send) and step.stream:
                if run.streamed is not None:
                    run.streamed.close()
                run.streamed = self._http.send(step.request, stream=True)
                run.lines = run.streamed.iter_lines()
                run.answer(run.streamed)
            elif isinstance(step, _steps.Send):
                run.answer(self._http.send(step.request))
            elif isinstance(step, _steps.ReadBody):
                step.response.read()
            elif isinstance(step, _steps.NextLine):
                run.answer(None if run.lines is None else next(run.lines, None))
            elif isinstance(step, _steps.Sleep):
                self._sleep(step.seconds)
            elif isinstance(step, _steps.Clock):
                run.answer(self._monotonic())
            elif isinstance(step, _steps.Blocking):
                run.answer(step.call())
            elif isinstance(step, _steps.Notify):
                step.callback(step.job)
        except httpx.TransportError as exc:
            run.fail(exc)
