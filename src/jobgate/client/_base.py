"""What the sync and async clients share: configuration, request building, response parsing,
the retry policy and the wait loop's decisions. The operations themselves are written once in
`_plans.py`; the twins only do the I/O (httpx's layout)."""

from __future__ import annotations

import email.utils
import json
import math
import os
import random
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from importlib import metadata
from typing import Any, Generic, Literal, TypeAlias, TypedDict, TypeVar
from urllib.parse import quote

import httpx

from jobgate.client import credentials, errors
from jobgate.client.backoff import Backoff
from jobgate.client.journal import Journal
from jobgate.client.models import Job

DEFAULT_TIMEOUT_S = 30.0
DEFAULT_MAX_RETRIES = 2
DEFAULT_LONG_POLL_S = 30.0
MAX_LONG_POLL_S = 60.0  # the server's limit for ?wait= and Prefer: wait
MAX_RETRY_AFTER_S = 60.0  # a request's own retries; wait() honours any Retry-After in budget
DEFAULT_TOKEN_TTL_S = 3_600  # a job token's life unless asked (the server's limit: a day)
DEFAULT_TOKEN_SCOPES = ("read", "stream")  # cancel is a write: asked for explicitly
STREAM_READ_TIMEOUT_S = 60.0  # the server sends a keep-alive comment every 15 s
_NETWORK_SLACK_S = 10.0  # read timeout beyond the time the server was asked to hold a request
_RETRY_STATUSES = frozenset({429, 503})  # the server did nothing: always safe to repeat
_RETRY_IF_IDEMPOTENT = frozenset({500, 502, 504})
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


def _version() -> str:
    try:
        return metadata.version("jobgate")
    except metadata.PackageNotFoundError:
        return "0"


USER_AGENT = f"jobgate-client/{_version()}"

# The sync client drives an httpx.Client over a BaseTransport, the async one an AsyncClient.
HttpT = TypeVar("HttpT", httpx.Client, httpx.AsyncClient)
TransportT = TypeVar("TransportT", httpx.BaseTransport, httpx.AsyncBaseTransport)


class SubmitOptions(TypedDict, total=False):
    """submit()'s keyword arguments besides `endpoint` and `body`."""

    provider: str | None
    metadata: Mapping[str, Any] | None
    webhook: Mapping[str, Any] | None
    priority: int | None
    max_attempts: int | None
    start_timeout_s: float | None
    execution_timeout_s: float | None
    stream: bool
    on_retry: Literal["continue", "restart"] | None
    idempotency_key: str | None
    wait_s: float | None


class JobFilter(TypedDict, total=False):
    """Which jobs list() and iter_jobs() answer: any of these statuses, dead-lettered or not,
    of this model and provider, created at or after `created_after` and before
    `created_before` (an aware datetime, or Unix seconds), whose metadata holds every pair of
    `metadata` (string values, exactly)."""

    status: str | Iterable[str] | None
    dead_lettered: bool | None
    model: str | None
    provider: str | None
    created_after: datetime | float | None
    created_before: datetime | float | None
    metadata: Mapping[str, str] | None


class ListOptions(JobFilter, total=False):
    """list()'s keyword arguments: the filter, and the page (`after` a job id, `limit`)."""

    after: str | None
    limit: int | None


class IterJobsOptions(JobFilter, total=False):
    """iter_jobs()'s keyword arguments: the filter, and how many jobs to fetch per page."""

    page_size: int


# The user's callback for each new status wait() sees (the async client awaits what it returns).
OnChange: TypeAlias = Callable[[Job], object] | None


def check_options(function: str, options: Mapping[str, object], allowed: Any) -> None:
    """Raise TypeError for a keyword argument `function` does not take (as Python would for
    a named parameter); `allowed` is the TypedDict that types the keywords."""
    unknown = sorted(options.keys() - allowed.__required_keys__ - allowed.__optional_keys__)
    if unknown:
        raise TypeError(f"{function}() got an unexpected keyword argument {unknown[0]!r}")


# The order of the optional fields in a submit's JSON body.
_BODY_FIELDS = (
    "provider",
    "metadata",
    "webhook",
    "priority",
    "max_attempts",
    "start_timeout_s",
    "execution_timeout_s",
    "stream",
    "on_retry",
)


class BaseClient(Generic[HttpT, TransportT]):
    """Settings and pure helpers; `Client` and `AsyncClient` add the I/O.

    `base_url` and `api_key` default to JOBGATE_URL / JOBGATE_API_KEY, then to the key that
    `jobgate serve` saved for that URL. `token` (a job token, `jgt_…`) instead of a key makes a
    client for that one job: get, wait, events, stream and (with its `cancel` scope) cancel.
    `transport` replaces httpx's (a MockTransport in tests).
    """

    _http: HttpT

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        token: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_retries: int = DEFAULT_MAX_RETRIES,
        long_poll_s: float = DEFAULT_LONG_POLL_S,
        journal: str | os.PathLike[str] | Journal | None = None,
        rng: random.Random | None = None,
        headers: Mapping[str, str] | None = None,
        transport: TransportT | None = None,
    ) -> None:
        if token is not None and api_key is not None:
            raise ValueError("pass api_key= or token=, not both")
        self.base_url, key = credentials.resolve(base_url, api_key)
        if token is not None:
            key = token  # a job token stands in for the key; no saved key is used
        if key is None:
            raise errors.CredentialsError(
                f"no API key for {self.base_url}: pass api_key=, set JOBGATE_API_KEY, or run "
                f"`jobgate serve` once on this machine (it saves its key to "
                f"{credentials.credentials_path()})"
            )
        if not 0 <= long_poll_s <= MAX_LONG_POLL_S:
            raise ValueError(f"long_poll_s must be between 0 and {MAX_LONG_POLL_S:g}")
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.long_poll_s = long_poll_s
        self.rng = rng or random.Random()
        self._owns_journal = journal is not None and not isinstance(journal, Journal)
        self.journal = (
            journal if isinstance(journal, Journal) or journal is None else Journal(journal)
        )
        self._headers = {
            "Authorization": f"Bearer {key}",
            "Accept": "application/json",
            "User-Agent": USER_AGENT,
            **(headers or {}),
        }
        self._http = self._new_http(transport)

    def _new_http(self, transport: TransportT | None) -> HttpT:
        """The httpx client (sync or async) that does this client's I/O."""
        raise NotImplementedError

    def _http_options(self) -> dict[str, Any]:
        return {
            "base_url": self.base_url,
            "headers": self._headers,
            "timeout": self._timeout(),
            "follow_redirects": False,
        }

    def _timeout(self) -> httpx.Timeout:
        return httpx.Timeout(self.timeout_s, connect=min(self.timeout_s, 10.0))

    def _require_journal(self) -> Journal:
        if self.journal is None:
            raise errors.ClientError("resume() needs a journal: Client(journal='ops.db')")
        return self.journal

    # -- building requests ------------------------------------------------------------

    @staticmethod
    def _submit_body(endpoint: str, body: Mapping[str, Any], options: SubmitOptions) -> bytes:
        check_options("submit", options, SubmitOptions)
        payload: dict[str, Any] = {"endpoint": endpoint, "body": dict(body)}
        for name in _BODY_FIELDS:
            value: Any = options.get(name)
            if name in ("metadata", "webhook") and value is not None:
                value = dict(value)
            if value is not None and value is not False:
                payload[name] = value
        return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()

    @staticmethod
    def _submit_headers(key: str, wait_s: float | None) -> dict[str, str]:
        headers = {"Idempotency-Key": key, "Content-Type": "application/json"}
        if wait_s:
            headers["Prefer"] = f"wait={int(min(wait_s, MAX_LONG_POLL_S))}"
        return headers

    def _held_timeout(self, held_s: float) -> httpx.Timeout:
        """A timeout for a request the server may hold for `held_s` seconds."""
        return httpx.Timeout(
            max(self.timeout_s, held_s + _NETWORK_SLACK_S), connect=min(self.timeout_s, 10.0)
        )

    @staticmethod
    def _job_path(job_id: str, suffix: str = "") -> str:
        return f"/v1/jobs/{quote(job_id, safe='')}{suffix}"

    @staticmethod
    def _list_params(options: ListOptions) -> list[tuple[str, str]]:
        """The query of GET /v1/jobs for list()'s keywords (None: left out)."""
        params: list[tuple[str, str]] = []
        status = options.get("status")
        if status is not None:
            statuses = [status] if isinstance(status, str) else list(status)
            params += [("status", str(s)) for s in statuses]
        dead_lettered = options.get("dead_lettered")
        if dead_lettered is not None:
            params.append(("dead_lettered", "true" if dead_lettered else "false"))
        for name in ("model", "provider", "after"):
            value = options.get(name)
            if value is not None:
                params.append((name, str(value)))
        for name, moment in (
            ("created_after", options.get("created_after")),
            ("created_before", options.get("created_before")),
        ):
            if moment is not None:
                params.append((name, _query_time(name, moment)))
        for key, value in (options.get("metadata") or {}).items():
            params.append((f"metadata[{key}]", value))
        limit = options.get("limit")
        if limit is not None:
            params.append(("limit", str(limit)))
        return params

    @staticmethod
    def _stream_headers(last_seq: int) -> dict[str, str]:
        headers = {"Accept": "text/event-stream", "Cache-Control": "no-store"}
        if last_seq:
            headers["Last-Event-ID"] = str(last_seq)
        return headers

    # -- parsing answers ----------------------------------------------------------------

    @staticmethod
    def _json(response: httpx.Response) -> Any:
        try:
            return response.json()
        except ValueError:
            raise errors.APIStatusError(
                f"the server answered {response.status_code} with a body that is not JSON",
                status=response.status_code,
                code="invalid_response",
                type="/problems/invalid_response",
                title="Invalid response",
                body=response.text[:500],
            ) from None

    def _job(self, response: httpx.Response) -> Job:
        return Job.from_json(self._json(response))

    @staticmethod
    def problem(response: httpx.Response) -> errors.APIStatusError:
        """The typed error for a non-2xx answer (RFC 9457 problem+json, or anything else)."""
        status = response.status_code
        try:
            body = response.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            body = {"detail": response.text[:200] or response.reason_phrase}
        error = body["error"] if isinstance(body.get("error"), dict) else {}
        problem_type = str(body.get("type") or "about:blank")
        code = body.get("code") or error.get("code")
        if not code and problem_type.startswith("/problems/"):
            code = problem_type.removeprefix("/problems/")
        code = str(code or f"http_{status}")
        message = str(body.get("detail") or error.get("message") or body.get("title") or status)
        cls = errors.error_class(status, code)
        return cls(
            message,
            status=status,
            code=code,
            type=problem_type,
            title=str(body.get("title") or response.reason_phrase),
            param=error.get("param"),
            retry_after_s=retry_after_s(response),
            body=body,
        )

    @staticmethod
    def _connection_error(exc: httpx.TransportError, url: str) -> errors.APIConnectionError:
        unsent = isinstance(exc, _NOT_SENT)
        cls = errors.APITimeoutError if isinstance(exc, httpx.TimeoutException) else None
        reason = str(exc) or type(exc).__name__
        if unsent:
            message = f"cannot reach {url}: {reason}"
        else:
            message = f"no answer from {url}: {reason}"
        return (cls or errors.APIConnectionError)(message, outcome_unknown=not unsent)

    # -- retry policy -------------------------------------------------------------------

    def _retry_after_failure(
        self, backoff: Backoff, exc: httpx.TransportError, *, idempotent: bool
    ) -> float | None:
        """Delay before repeating a request that got no answer, or None to give up."""
        if backoff.attempt >= self.max_retries:
            return None
        if not idempotent and not isinstance(exc, _NOT_SENT):
            return None  # it may have been applied: repeating it could apply it twice
        return backoff.next_delay_s()

    def _retry_after_answer(
        self, backoff: Backoff, error: errors.APIStatusError, *, idempotent: bool
    ) -> float | None:
        """Delay before repeating a refused request, or None to raise `error`."""
        if backoff.attempt >= self.max_retries:
            return None
        retry_after = error.retry_after_s
        if retry_after is not None and retry_after > MAX_RETRY_AFTER_S:
            return None
        retryable = (
            error.status in _RETRY_STATUSES
            or isinstance(error, errors.IdempotencyInProgressError)
            or (idempotent and error.status in _RETRY_IF_IDEMPOTENT)
        )
        return backoff.next_delay_s(retry_after) if retryable else None


def retry_after_s(response: httpx.Response) -> float | None:
    """Retry-After as seconds: delta-seconds, or an HTTP date measured against the answer's
    own Date header (so a skewed local clock does not matter)."""
    value = response.headers.get("Retry-After")
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        target = email.utils.parsedate_to_datetime(value)
        sent = email.utils.parsedate_to_datetime(response.headers.get("Date", ""))
    except (TypeError, ValueError):
        return None
    return max(0.0, (target - sent).total_seconds())


class WaitState:
    """The decisions of one `wait()`: how long to long-poll, when to back off, when to stop.

    After one plain read, long polling asks the server to hold `GET /v1/jobs/{id}?wait=N`
    until the status changes.
    An answer that comes back early with nothing changed means something in between does not
    hold requests (or an old server ignores the parameter): then the client falls back to
    polling with full-jitter backoff (1 s doubling to 30 s). A broken long poll halves the
    window, in case a proxy cuts idle requests. 429 and 503 are retried no sooner than their
    Retry-After; other refusals are raised. Until the first answer, the client's ordinary
    retry limit applies, so a wrong URL or key fails fast; after it, transient trouble is
    ridden out until the deadline.
    """

    def __init__(
        self,
        job_id: str,
        *,
        timeout_s: float | None,
        long_poll_s: float,
        max_retries: int,
        backoff: Backoff,
        now: float,
    ) -> None:
        self.job_id = job_id
        self.timeout_s = timeout_s
        self.deadline = None if timeout_s is None else now + timeout_s
        self.long_poll_s = long_poll_s
        self.max_retries = max_retries
        self.backoff = backoff
        self.last: Job | None = None

    def window_s(self, now: float) -> float:
        """Seconds to ask the server to hold the next request (0: a plain read). The first
        request is a plain read, so the caller learns the current status at once."""
        if self.last is None:
            return 0.0
        window = self.long_poll_s
        if self.deadline is not None:
            window = min(window, self.deadline - now)
        return max(0.0, math.floor(window * 10) / 10)

    def observe(self, job: Job) -> bool:
        """Record an answer; True if the status changed (or it is the first answer)."""
        changed = self.last is None or self.last.status != job.status
        self.last = job
        return changed

    def after_answer(self, *, changed: bool, window_s: float, elapsed_s: float) -> float:
        """Delay after a non-terminal answer."""
        if changed or (window_s >= 1.0 and elapsed_s >= window_s / 2):
            self.backoff.reset()  # long polling works: ask again at once
            return 0.0
        return self.backoff.next_delay_s()

    def after_failure(self, exc: httpx.TransportError, *, window_s: float) -> float | None:
        """Delay after a request that got no answer, or None to raise."""
        if self.last is None and self.backoff.attempt >= self.max_retries:
            return None
        if window_s >= 1.0 and not isinstance(exc, _NOT_SENT):
            # Something cut a held request: hold shorter ones, down to plain polling.
            self.long_poll_s = self.long_poll_s / 2 if self.long_poll_s >= 2.0 else 0.0
        return self.backoff.next_delay_s()

    def after_refusal(self, error: errors.APIStatusError) -> float | None:
        """Delay after an error answer, or None to raise it."""
        transient = error.status in _RETRY_STATUSES or error.status in (502, 504)
        if not transient or (self.last is None and self.backoff.attempt >= self.max_retries):
            return None
        return self.backoff.next_delay_s(error.retry_after_s)

    def budget(self, delay_s: float, now: float) -> float:
        """`delay_s`, or raise WaitTimeout if the next request would start past the deadline."""
        if self.deadline is not None and now + delay_s >= self.deadline:
            assert self.timeout_s is not None
            raise errors.WaitTimeout(self.job_id, self.timeout_s, self.last)
        return delay_s


def _query_time(name: str, moment: datetime | float) -> str:
    """A search time as the server reads it: RFC 3339 for a datetime (which must say its
    time zone: a naive one would be read in no zone at all), else Unix seconds."""
    if isinstance(moment, datetime):
        if moment.tzinfo is None:
            raise ValueError(f"{name} needs a time zone (datetime.now(UTC), not datetime.now())")
        return moment.isoformat()
    if isinstance(moment, bool) or not isinstance(moment, int | float):
        raise TypeError(f"{name} is a datetime or Unix seconds, not {type(moment).__name__}")
    return repr(int(moment)) if float(moment).is_integer() else repr(float(moment))
