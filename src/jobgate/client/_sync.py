"""The synchronous client."""

from __future__ import annotations

import builtins
import dataclasses
import os
import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import TracebackType
from typing import Any

import httpx

from jobgate.client import bulk, errors
from jobgate.client._base import (
    DEFAULT_LONG_POLL_S,
    DEFAULT_MAX_RETRIES,
    DEFAULT_TIMEOUT_S,
    STREAM_READ_TIMEOUT_S,
    BaseClient,
    WaitState,
)
from jobgate.client.backoff import Backoff
from jobgate.client.journal import Journal, Operation, new_operation_id
from jobgate.client.models import EventPage, Job, JobEvent, JobPage, OutputDelta
from jobgate.client.sse import SSEDecoder


class Client(BaseClient):
    """A client for jobgate's native API.

    `base_url` and `api_key` default to JOBGATE_URL / JOBGATE_API_KEY, then to the key that
    `jobgate serve` saved for that URL. Every request that is safe to repeat is retried on a
    lost connection, 429 and 503 (at most `max_retries` times, full-jitter backoff, never
    sooner than Retry-After). A submit is always safe to repeat: it carries an
    Idempotency-Key (yours, or a fresh operation id). With `journal="ops.db"` every submit is
    recorded before it is sent; `resume()` settles what a crash left unfinished.
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_retries: int = DEFAULT_MAX_RETRIES,
        long_poll_s: float = DEFAULT_LONG_POLL_S,
        journal: str | os.PathLike[str] | Journal | None = None,
        rng: random.Random | None = None,
        headers: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(
            base_url,
            api_key,
            timeout_s=timeout_s,
            max_retries=max_retries,
            long_poll_s=long_poll_s,
            journal=journal,
            rng=rng,
            headers=headers,
        )
        self._http = httpx.Client(
            base_url=self.base_url,
            headers=self._headers,
            timeout=self._timeout(),
            transport=transport,
            follow_redirects=False,
        )

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
        self,
        endpoint: str,
        body: Mapping[str, Any],
        *,
        provider: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        webhook: Mapping[str, Any] | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        start_timeout_s: float | None = None,
        execution_timeout_s: float | None = None,
        stream: bool = False,
        idempotency_key: str | None = None,
        wait_s: float | None = None,
    ) -> Job:
        """Submit a job; answers at once with it `queued` (or, with `wait_s` ≤ 60, finished if
        it finished in time). `stream`: the job's output is served live (`stream()`) while it
        runs. Repeating a call with the same `idempotency_key` and body
        answers the same job; with a journal the key is the journaled operation's id."""
        content = self._submit_body(
            endpoint,
            body,
            provider=provider,
            metadata=metadata,
            webhook=webhook,
            priority=priority,
            max_attempts=max_attempts,
            start_timeout_s=start_timeout_s,
            execution_timeout_s=execution_timeout_s,
            stream=stream,
        )
        return self._submit(idempotency_key or new_operation_id(), content, wait_s)

    def submit_many(self, items: Iterable[Mapping[str, Any]]) -> builtins.list[bulk.BulkResult]:
        """Submit many jobs through `POST /v1/jobs/bulk`, 1,000 per call, one transaction per
        call. Each item is a mapping with `endpoint`, `body` and any of submit()'s keyword
        arguments (`idempotency_key` included; one is generated where missing, so a lost
        answer is retried safely). Answers one entry per item, in order: the Job, or the
        APIStatusError that refused that item alone."""
        out: builtins.list[bulk.BulkResult] = []
        for content in bulk.calls(items):
            response = self._request("POST", bulk.BULK_PATH, content=content, headers=bulk.HEADERS)
            out.extend(bulk.results(self._json(response)))
        return out

    def _submit(self, key: str, content: bytes, wait_s: float | None) -> Job:
        if self.journal is not None:
            self.journal.record_send(key, base_url=self.base_url, request=content)
        try:
            response = self._request(
                "POST",
                "/v1/jobs",
                content=content,
                headers=self._submit_headers(key, wait_s),
                request_timeout=self._held_timeout(wait_s) if wait_s else None,
            )
        except errors.APIStatusError as exc:
            if self.journal is not None:
                self.journal.record_refusal(key, exc)
            raise
        job = self._job(response)
        if self.journal is not None:
            self.journal.record_job(key, job)
        return job

    def get(self, job_id: str) -> Job:
        """The job as it stands now."""
        return self._observed(self._job(self._request("GET", self._job_path(job_id))))

    def wait(
        self,
        job_id: str,
        *,
        timeout_s: float | None = None,
        on_change: Callable[[Job], object] | None = None,
    ) -> Job:
        """Block until the job is terminal and return it; raise WaitTimeout (carrying the last
        job seen) if `timeout_s` passes first. `on_change` is called with each new status seen.
        """
        state = WaitState(
            job_id,
            timeout_s=timeout_s,
            long_poll_s=self.long_poll_s,
            max_retries=self.max_retries,
            backoff=Backoff(self.rng),
            now=self._monotonic(),
        )
        path = self._job_path(job_id)
        while True:
            window = state.window_s(self._monotonic())
            request = self._http.build_request(
                "GET",
                path,
                params={"wait": f"{window:g}"} if window else None,
                timeout=self._held_timeout(window),
            )
            started = self._monotonic()
            delay: float | None
            try:
                response = self._http.send(request)
            except httpx.TransportError as exc:
                delay = state.after_failure(exc, window_s=window)
                if delay is None:
                    raise self._connection_error(exc, self.base_url) from exc
            else:
                if response.is_success:
                    job = self._job(response)
                    changed = state.observe(job)
                    if changed and on_change is not None:
                        on_change(job)
                    if job.terminal:
                        return self._observed(job)
                    elapsed = self._monotonic() - started
                    delay = state.after_answer(changed=changed, window_s=window, elapsed_s=elapsed)
                else:
                    error = self.problem(response)
                    delay = state.after_refusal(error)
                    if delay is None:
                        raise error
            self._sleep(state.budget(delay, self._monotonic()))

    def cancel(self, job_id: str) -> Job:
        """Cancel (idempotent): a queued job is cancelled at once, a running one once its
        worker has stopped the call; a finished job is answered unchanged."""
        return self._observed(self._job(self._request("POST", self._job_path(job_id, "/cancel"))))

    def delete(self, job_id: str) -> Job:
        """Cancel if still live, then purge the job's input and result (the record stays)."""
        return self._observed(self._job(self._request("DELETE", self._job_path(job_id))))

    def retry(self, job_id: str) -> Job:
        """Redrive a dead-lettered job (NotDeadLetteredError for any other)."""
        response = self._request("POST", self._job_path(job_id, "/retry"), idempotent=False)
        return self._observed(self._job(response))

    def list(
        self,
        *,
        status: str | Iterable[str] | None = None,
        dead_lettered: bool | None = None,
        after: str | None = None,
        limit: int | None = None,
    ) -> JobPage:
        """One page of jobs, newest first."""
        params = self._list_params(status, dead_lettered, after, limit)
        return JobPage.from_json(self._json(self._request("GET", "/v1/jobs", params=params)))

    def iter_jobs(
        self,
        *,
        status: str | Iterable[str] | None = None,
        dead_lettered: bool | None = None,
        page_size: int = 100,
    ) -> Iterator[Job]:
        """Every matching job, newest first, fetching pages as it goes."""
        after: str | None = None
        while True:
            page = self.list(
                status=status, dead_lettered=dead_lettered, after=after, limit=page_size
            )
            yield from page.data
            if not page.has_more or page.last_id is None:
                return
            after = page.last_id

    def event_log(self, job_id: str, *, after: int = 0, limit: int | None = None) -> EventPage:
        """One page of the job's transition log (events with seq > `after`)."""
        params: dict[str, Any] = {"after": after}
        if limit is not None:
            params["limit"] = limit
        response = self._request("GET", self._job_path(job_id, "/events"), params=params)
        return EventPage.from_json(self._json(response))

    def events(self, job_id: str, *, after: int = 0, max_reconnects: int = 8) -> Iterator[JobEvent]:
        """Follow the job's events live (SSE) until it is terminal. A dropped stream is resumed
        where it broke (Last-Event-ID), so no event is lost or repeated; `after` starts past a
        sequence number. Gives up after `max_reconnects` failures in a row."""
        last = after
        backoff = Backoff(self.rng)
        saw_terminal = False
        path = self._job_path(job_id, "/events")
        timeout = httpx.Timeout(self.timeout_s, read=STREAM_READ_TIMEOUT_S)
        while True:
            received = 0
            delay: float | None = None
            try:
                with self._http.stream(
                    "GET", path, headers=self._stream_headers(last), timeout=timeout
                ) as response:
                    if not response.is_success:
                        response.read()
                        error = self.problem(response)
                        delay = self._retry_after_answer(backoff, error, idempotent=True)
                        if delay is None:
                            raise error
                    else:
                        decoder = SSEDecoder()
                        for line in response.iter_lines():
                            sse = decoder.feed(line)
                            if sse is None or sse.event != "job.event":
                                continue
                            event = self._event(sse.data)
                            if event.seq <= last:
                                continue
                            last, received = event.seq, received + 1
                            saw_terminal = saw_terminal or event.terminal
                            backoff.reset()
                            yield event
            except httpx.TransportError as exc:
                if backoff.attempt >= max_reconnects:
                    raise self._connection_error(exc, self.base_url) from exc
                delay = backoff.next_delay_s()
            if delay is None:
                # The server ends the stream after the terminal event.
                if saw_terminal or (received == 0 and self.get(job_id).terminal):
                    return
                delay = backoff.next_delay_s()  # closed early (a restart): resume
            self._sleep(delay)

    def stream(
        self, job_id: str, *, starting_after: int = 0, max_reconnects: int = 8
    ) -> Iterator[OutputDelta]:
        """Follow the job's output live (SSE) as its worker produces it, until the job is
        terminal; each item is a text delta (an `OutputDelta`, a str). A dropped stream is
        resumed where it broke (Last-Event-ID), so no text is lost or repeated. A delta with
        `reset` True starts a new attempt's text: discard what came before. A job submitted
        without `stream=True` gives its whole text as one delta when it finishes. Gives up
        after `max_reconnects` failures in a row."""
        last = starting_after
        backoff = Backoff(self.rng)
        finished = False
        reset = False
        path = self._job_path(job_id, "/stream")
        timeout = httpx.Timeout(self.timeout_s, read=STREAM_READ_TIMEOUT_S)
        while True:
            delay: float | None = None
            try:
                with self._http.stream(
                    "GET", path, headers=self._stream_headers(last), timeout=timeout
                ) as response:
                    if not response.is_success:
                        response.read()
                        error = self.problem(response)
                        delay = self._retry_after_answer(backoff, error, idempotent=True)
                        if delay is None:
                            raise error
                    else:
                        decoder = SSEDecoder()
                        for line in response.iter_lines():
                            sse = decoder.feed(line)
                            if sse is None:
                                continue
                            if sse.event == "output.reset":
                                reset = True
                            elif sse.event == "output.delta":
                                delta = self._output_delta(sse, last, reset)
                                if delta is not None:
                                    last, reset = delta.seq, False
                                    backoff.reset()
                                    yield delta
                            elif sse.event.startswith("job."):
                                finished = True
            except httpx.TransportError as exc:
                if backoff.attempt >= max_reconnects:
                    raise self._connection_error(exc, self.base_url) from exc
                delay = backoff.next_delay_s()
            if delay is None:
                if finished:  # the server ends the stream after the terminal event
                    return
                delay = backoff.next_delay_s()  # closed early (a restart): resume
            self._sleep(delay)

    # -- journal ------------------------------------------------------------------------

    def resume(self) -> builtins.list[Operation]:
        """Settle what the journal holds unfinished for this server: re-send each submit whose
        outcome is unknown with its original key and body (the server answers the job it
        created, or creates it now: never twice), and refresh the others. Pending submits
        older than the server keeps keys become `stale` instead. Returns the operations
        touched, each with its `job`."""
        journal = self._require_journal()
        journal.mark_stale_pending(self.base_url)
        settled: builtins.list[Operation] = []
        for op in journal.unfinished(self.base_url):
            job: Job | None = None
            try:
                if op.state == "pending":
                    job = self._submit(op.id, op.request_json.encode(), None)
                else:
                    assert op.job_id is not None
                    job = self.get(op.job_id)
            except errors.NotFoundError:
                if op.state == "pending":
                    raise
                journal.record_missing(op.id)
            except errors.APIStatusError as exc:
                if exc.status not in (400, 413, 422):
                    raise
            current = journal.get(op.id)
            assert current is not None
            settled.append(dataclasses.replace(current, job=job))
        return settled

    # -- plumbing -----------------------------------------------------------------------

    def _observed(self, job: Job) -> Job:
        if self.journal is not None:
            self.journal.record_status(job)
        return job

    def _request(
        self,
        method: str,
        path: str,
        *,
        params: Any = None,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        request_timeout: httpx.Timeout | None = None,
        idempotent: bool = True,
    ) -> httpx.Response:
        request = self._http.build_request(
            method,
            path,
            params=params,
            content=content,
            headers=headers,
            timeout=request_timeout or self._timeout(),
        )
        backoff = Backoff(self.rng)
        while True:
            try:
                response = self._http.send(request)
            except httpx.TransportError as exc:
                delay = self._retry_after_failure(backoff, exc, idempotent=idempotent)
                if delay is None:
                    raise self._connection_error(exc, self.base_url) from exc
            else:
                if response.is_success:
                    return response
                error = self.problem(response)
                delay = self._retry_after_answer(backoff, error, idempotent=idempotent)
                if delay is None:
                    raise error
            self._sleep(delay)
