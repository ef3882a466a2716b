"""Every client operation, written once as a plan: a generator of I/O steps (`_steps.py`).

A plan holds all the decisions (which request, when to retry and how long to back off, which
cursor a dropped stream resumes from, when a wait or a stream is done, how answers and
events are parsed) and performs no I/O: `Client` and `AsyncClient` drive it. So the sync and
async twins cannot drift apart, and a plan can be read top to bottom like the blocking code
it stands for.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Iterable, Mapping
from typing import Any

import httpx

from jobgate.client import bulk, errors
from jobgate.client._base import (
    STREAM_READ_TIMEOUT_S,
    BaseClient,
    HttpT,
    IterJobsOptions,
    JobFilter,
    ListOptions,
    OnChange,
    SubmitOptions,
    TransportT,
    WaitState,
    check_options,
)
from jobgate.client._steps import (
    Blocking,
    Clock,
    Emit,
    NextLine,
    Notify,
    Plan,
    ReadBody,
    Send,
    Sleep,
)
from jobgate.client.backoff import Backoff
from jobgate.client.journal import Operation, new_operation_id
from jobgate.client.models import EventPage, Job, JobEvent, JobPage, JobToken, OutputDelta
from jobgate.client.sse import ServerSentEvent, SSEDecoder


class EventReader:
    """What `events()` hands out of an SSE stream: each `job.event` once, in order, past the
    cursor `last` (the Last-Event-ID a dropped stream resumes from)."""

    def __init__(self, after: int) -> None:
        self.last = after
        self.saw_terminal = False

    def read(self, sse: ServerSentEvent) -> JobEvent | None:
        if sse.event != "job.event":
            return None
        event = JobEvent.from_json(json.loads(sse.data))
        if event.seq <= self.last:
            return None
        self.last = event.seq
        self.saw_terminal = self.saw_terminal or event.terminal
        return event

    def finished(self, received: int) -> bool | None:
        """Whether a stream that ended cleanly means the job is over: the server ends it after
        the terminal event. None: unknown (nothing came), ask the server for the job."""
        if self.saw_terminal:
            return True
        return None if received == 0 else False


class OutputReader:
    """What `stream()` hands out of an SSE stream: each text delta once, past the cursor
    `last`; an `output.reset` marks the next delta as a new attempt's start (with the
    characters of the text so far it continues, `continued_chars`)."""

    def __init__(self, starting_after: int) -> None:
        self.last = starting_after
        self.reset = False
        self.continued_chars = 0  # of the reset: the new attempt repeats that much text first
        self.done = False

    def read(self, sse: ServerSentEvent) -> OutputDelta | None:
        if sse.event == "output.reset":
            self.reset = True
            continued = json.loads(sse.data).get("continued_chars")
            self.continued_chars = continued if isinstance(continued, int) else 0
        elif sse.event == "output.delta":
            data = json.loads(sse.data)
            seq = int(data["seq"])
            if seq > self.last:
                delta = OutputDelta(
                    str(data["text"]),
                    seq=seq,
                    reset=self.reset,
                    continued_chars=self.continued_chars if self.reset else 0,
                )
                self.last, self.reset, self.continued_chars = seq, False, 0
                return delta
        elif sse.event.startswith("job."):
            self.done = True
        return None

    def finished(self, received: int) -> bool | None:
        """The server ends the stream after the job's terminal event; any other end is a
        restart to resume from."""
        return self.done


class Plans(BaseClient[HttpT, TransportT]):
    """The operations of `Client` and `AsyncClient` as plans (see the module docstring)."""

    # -- one request ----------------------------------------------------------------------

    def _plan_request(
        self,
        method: str,
        path: str,
        *,
        params: Any = None,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        request_timeout: httpx.Timeout | None = None,
        idempotent: bool = True,
    ) -> Plan[httpx.Response]:
        """One request and its retries (see `_retry_after_failure`, `_retry_after_answer`);
        returns a 2xx answer or raises the typed error."""
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
                response: httpx.Response = yield Send(request)
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
            yield Sleep(delay)

    def _plan_job(self, method: str, path: str, *, idempotent: bool = True) -> Plan[Job]:
        """A request answered with a job, which the journal (if any) records."""
        response = yield from self._plan_request(method, path, idempotent=idempotent)
        return (yield from self._plan_observed(self._job(response)))

    def _plan_observed(self, job: Job) -> Plan[Job]:
        if self.journal is not None:
            yield Blocking(functools.partial(self.journal.record_status, job))
        return job

    # -- submitting -----------------------------------------------------------------------

    def _plan_submit(
        self, endpoint: str, body: Mapping[str, Any], options: SubmitOptions
    ) -> Plan[Job]:
        content = self._submit_body(endpoint, body, options)
        key = options.get("idempotency_key") or new_operation_id()
        return (yield from self._plan_send_submit(key, content, options.get("wait_s")))

    def _plan_send_submit(self, key: str, content: bytes, wait_s: float | None) -> Plan[Job]:
        """POST /v1/jobs under `key`, journaled before it is sent and after it is answered."""
        journal = self.journal
        if journal is not None:
            send = functools.partial(
                journal.record_send, key, base_url=self.base_url, request=content
            )
            yield Blocking(send)
        try:
            response = yield from self._plan_request(
                "POST",
                "/v1/jobs",
                content=content,
                headers=self._submit_headers(key, wait_s),
                request_timeout=self._held_timeout(wait_s) if wait_s else None,
            )
        except errors.APIStatusError as exc:
            if journal is not None:
                yield Blocking(functools.partial(journal.record_refusal, key, exc))
            raise
        job = self._job(response)
        if journal is not None:
            yield Blocking(functools.partial(journal.record_job, key, job))
        return job

    def _plan_submit_many(self, items: Iterable[Mapping[str, Any]]) -> Plan[list[bulk.BulkResult]]:
        out: list[bulk.BulkResult] = []
        for content in bulk.calls(items):
            response = yield from self._plan_request(
                "POST", bulk.BULK_PATH, content=content, headers=bulk.HEADERS
            )
            out.extend(bulk.results(self._json(response)))
        return out

    # -- waiting --------------------------------------------------------------------------

    def _plan_wait(self, job_id: str, timeout_s: float | None, on_change: OnChange) -> Plan[Job]:
        """Long-poll (or poll, where long polling does not work) until the job is terminal;
        `WaitState` makes every decision."""
        state = WaitState(
            job_id,
            timeout_s=timeout_s,
            long_poll_s=self.long_poll_s,
            max_retries=self.max_retries,
            backoff=Backoff(self.rng),
            now=(yield Clock()),
        )
        path = self._job_path(job_id)
        while True:
            window = state.window_s((yield Clock()))
            request = self._http.build_request(
                "GET",
                path,
                params={"wait": f"{window:g}"} if window else None,
                timeout=self._held_timeout(window),
            )
            started: float = yield Clock()
            delay: float | None
            try:
                response: httpx.Response = yield Send(request)
            except httpx.TransportError as exc:
                delay = state.after_failure(exc, window_s=window)
                if delay is None:
                    raise self._connection_error(exc, self.base_url) from exc
            else:
                if response.is_success:
                    job = self._job(response)
                    changed = state.observe(job)
                    if changed and on_change is not None:
                        yield Notify(on_change, job)
                    if job.terminal:
                        return (yield from self._plan_observed(job))
                    elapsed = (yield Clock()) - started
                    delay = state.after_answer(changed=changed, window_s=window, elapsed_s=elapsed)
                else:
                    error = self.problem(response)
                    delay = state.after_refusal(error)
                    if delay is None:
                        raise error
            yield Sleep(state.budget(delay, (yield Clock())))

    # -- listing --------------------------------------------------------------------------

    def _plan_list(self, options: ListOptions) -> Plan[JobPage]:
        check_options("list", options, ListOptions)
        params = self._list_params(options)
        response = yield from self._plan_request("GET", "/v1/jobs", params=params)
        return JobPage.from_json(self._json(response))

    def _plan_iter_jobs(self, options: IterJobsOptions) -> Plan[None]:
        check_options("iter_jobs", options, IterJobsOptions)  # now, not at the first page
        filters = JobFilter(**{k: v for k, v in options.items() if k != "page_size"})  # type: ignore[typeddict-item]
        return self._plan_pages(filters, options.get("page_size", 100))

    def _plan_pages(self, filters: JobFilter, page_size: int) -> Plan[None]:
        """Emits every matching job, newest first, fetching pages as it goes."""
        after: str | None = None
        while True:
            page = yield from self._plan_list({**filters, "after": after, "limit": page_size})
            for job in page.data:
                yield Emit(job)
            if not page.has_more or page.last_id is None:
                return
            after = page.last_id

    def _plan_create_job_token(
        self, job_id: str, ttl_s: int, scopes: Iterable[str]
    ) -> Plan[JobToken]:
        content = json.dumps({"ttl_s": ttl_s, "scopes": list(scopes)}).encode()
        response = yield from self._plan_request(
            "POST",
            self._job_path(job_id, "/tokens"),
            content=content,
            headers={"Content-Type": "application/json"},
        )
        return JobToken.from_json(self._json(response))

    def _plan_event_log(self, job_id: str, after: int, limit: int | None) -> Plan[EventPage]:
        params: dict[str, Any] = {"after": after}
        if limit is not None:
            params["limit"] = limit
        response = yield from self._plan_request(
            "GET", self._job_path(job_id, "/events"), params=params
        )
        return EventPage.from_json(self._json(response))

    # -- following a stream ---------------------------------------------------------------

    def _plan_events(self, job_id: str, after: int, max_reconnects: int) -> Plan[None]:
        return self._plan_follow(job_id, "/events", EventReader(after), max_reconnects)

    def _plan_stream(self, job_id: str, starting_after: int, max_reconnects: int) -> Plan[None]:
        return self._plan_follow(job_id, "/stream", OutputReader(starting_after), max_reconnects)

    def _plan_follow(
        self, job_id: str, suffix: str, reader: EventReader | OutputReader, max_reconnects: int
    ) -> Plan[None]:
        """Emits what `reader` takes from the job's SSE stream at `suffix`. A dropped or
        refused stream is reopened from the reader's cursor (Last-Event-ID) with backoff,
        giving up after `max_reconnects` failures in a row; a clean end is the end once the
        reader (or, where it cannot tell, the job itself) says the job is over."""
        backoff = Backoff(self.rng)
        path = self._job_path(job_id, suffix)
        timeout = httpx.Timeout(self.timeout_s, read=STREAM_READ_TIMEOUT_S)
        while True:
            received = 0
            delay: float | None = None
            try:
                request = self._http.build_request(
                    "GET", path, headers=self._stream_headers(reader.last), timeout=timeout
                )
                response: httpx.Response = yield Send(request, stream=True)
                if not response.is_success:
                    yield ReadBody(response)
                    error = self.problem(response)
                    delay = self._retry_after_answer(backoff, error, idempotent=True)
                    if delay is None:
                        raise error
                else:
                    decoder = SSEDecoder()
                    while (line := (yield NextLine())) is not None:
                        sse = decoder.feed(line)
                        item = None if sse is None else reader.read(sse)
                        if item is not None:
                            received += 1
                            backoff.reset()
                            yield Emit(item)
            except httpx.TransportError as exc:
                if backoff.attempt >= max_reconnects:
                    raise self._connection_error(exc, self.base_url) from exc
                delay = backoff.next_delay_s()
            if delay is None:
                finished = reader.finished(received)
                if finished is None:
                    finished = (yield from self._plan_job("GET", self._job_path(job_id))).terminal
                if finished:
                    return
                delay = backoff.next_delay_s()  # closed early (a restart): resume
            yield Sleep(delay)

    # -- the journal ----------------------------------------------------------------------

    def _plan_resume(self) -> Plan[list[Operation]]:
        """Re-send each unsettled submit with its original key and body, refresh the rest."""
        journal = self._require_journal()
        yield Blocking(functools.partial(journal.mark_stale_pending, self.base_url))
        unfinished: list[Operation] = yield Blocking(
            functools.partial(journal.unfinished, self.base_url)
        )
        settled: list[Operation] = []
        for op in unfinished:
            job: Job | None = None
            try:
                if op.state == "pending":
                    job = yield from self._plan_send_submit(op.id, op.request_json.encode(), None)
                else:
                    assert op.job_id is not None
                    job = yield from self._plan_job("GET", self._job_path(op.job_id))
            except errors.NotFoundError:
                if op.state == "pending":
                    raise
                yield Blocking(functools.partial(journal.record_missing, op.id))
            except errors.APIStatusError as exc:
                if exc.status not in (400, 413, 422):
                    raise
            current: Operation | None = yield Blocking(functools.partial(journal.get, op.id))
            assert current is not None
            settled.append(dataclasses.replace(current, job=job))
        return settled
