"""Typed, dependency-free views of the API's JSON: jobs, their events, and list pages.

Parsing is lenient on purpose: unknown fields are ignored and missing optional fields read as
None, so an older client keeps working against a newer server. `raw` keeps the full JSON.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

JSONObject = dict[str, Any]


class JobStatus(enum.StrEnum):
    """The states a job can be in; `Job.status` compares equal to these."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    EXPIRED = "expired"


TERMINAL_STATUSES = frozenset({"succeeded", "failed", "cancelled", "expired"})


@dataclasses.dataclass(frozen=True, slots=True)
class JobError:
    """Why a job failed: `code` is stable (e.g. `rate_limit_exceeded`), `message` is for people."""

    code: str
    message: str
    type: str

    @classmethod
    def from_json(cls, data: JSONObject) -> JobError:
        return cls(
            code=str(data.get("code", "")),
            message=str(data.get("message", "")),
            type=str(data.get("type", "")),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class JobWaiting:
    """Why a job is not being worked on, as the server's claim rules see it: `reason` is one
    of `scheduled`, `paused`, `no_worker`, `budget_exhausted`, `breaker_open`, `rate_limited`,
    `tenant_cap`, `key_cap`, `queue`; `detail` says it for people; `until` is when it should
    end by itself (Unix seconds; None: not by itself)."""

    reason: str
    detail: str
    until: int | None

    @classmethod
    def from_json(cls, data: JSONObject) -> JobWaiting:
        until = data.get("until")
        return cls(
            reason=str(data.get("reason", "")),
            detail=str(data.get("detail", "")),
            until=until if isinstance(until, int) else None,
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Job:
    """A job as the server last described it. Times are Unix seconds. `waiting` (a status
    read or a list) says why a job that is not running waits; None: nothing holds it, or the
    answer did not say."""

    id: str
    status: str
    provider: str
    endpoint: str
    model: str | None
    created_at: int
    started_at: int | None
    completed_at: int | None
    cancel_requested_at: int | None
    expires_at: int | None
    attempt: int
    max_attempts: int
    priority: int
    phase: str | None
    provider_job_id: str | None
    progress: float | None
    result: JSONObject | None
    error: JobError | None
    usage: JSONObject | None
    metadata: JSONObject
    dead_lettered: bool
    purged: bool
    raw: JSONObject = dataclasses.field(repr=False, compare=False)
    waiting: JobWaiting | None = None
    queue_position: int | None = None
    # False: queue_position is a floor (at least that place; the server walks 100 jobs ahead)
    queue_position_exact: bool | None = None

    @property
    def terminal(self) -> bool:
        """Whether the job is finished for good (succeeded, failed, cancelled or expired)."""
        return self.status in TERMINAL_STATUSES

    @property
    def output_text(self) -> str | None:
        """The assistant's text for a chat completion, messages or responses result; else None."""
        return output_text(self.result)

    @classmethod
    def from_json(cls, data: JSONObject) -> Job:
        error, waiting = data.get("error"), data.get("waiting")
        return cls(
            id=str(data["id"]),
            status=str(data["status"]),
            provider=str(data.get("provider") or ""),
            endpoint=str(data.get("endpoint") or ""),
            model=data.get("model"),
            created_at=int(data.get("created_at") or 0),
            started_at=data.get("started_at"),
            completed_at=data.get("completed_at"),
            cancel_requested_at=data.get("cancel_requested_at"),
            expires_at=data.get("expires_at"),
            attempt=int(data.get("attempt") or 0),
            max_attempts=int(data.get("max_attempts") or 0),
            priority=int(data.get("priority") or 0),
            phase=data.get("phase"),
            provider_job_id=data.get("provider_job_id"),
            progress=data.get("progress"),
            result=data.get("result"),
            error=JobError.from_json(error) if isinstance(error, dict) else None,
            usage=data.get("usage"),
            metadata=dict(data.get("metadata") or {}),
            dead_lettered=bool(data.get("dead_lettered")),
            purged=bool(data.get("purged")),
            raw=data,
            waiting=JobWaiting.from_json(waiting) if isinstance(waiting, dict) else None,
            queue_position=data.get("queue_position"),
            queue_position_exact=data.get("queue_position_exact"),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class JobEvent:
    """One row of a job's transition log. `applied` is False for a late or duplicate event
    that the server recorded but ignored (terminal states never change)."""

    job_id: str
    seq: int
    from_status: str | None
    to_status: str
    actor: str
    reason: str | None
    applied: bool
    created_at: int
    raw: JSONObject = dataclasses.field(repr=False, compare=False)

    @property
    def terminal(self) -> bool:
        return self.applied and self.to_status in TERMINAL_STATUSES

    @classmethod
    def from_json(cls, data: JSONObject) -> JobEvent:
        return cls(
            job_id=str(data["job_id"]),
            seq=int(data["seq"]),
            from_status=data.get("from"),
            to_status=str(data["to"]),
            actor=str(data.get("actor") or ""),
            reason=data.get("reason"),
            applied=bool(data.get("applied", True)),
            created_at=int(data.get("created_at") or 0),
            raw=data,
        )


@dataclasses.dataclass(frozen=True, slots=True)
class JobPage:
    """One page of `GET /v1/jobs`, newest first; while `has_more`, pass `last_id` as `after`
    for the next. A search's page may be partial: fewer jobs than its limit, even none, with
    `has_more` true and `last_id` the last job the server read (not always one in `data`)."""

    data: list[Job]
    has_more: bool
    last_id: str | None

    @classmethod
    def from_json(cls, data: JSONObject) -> JobPage:
        return cls(
            data=[Job.from_json(item) for item in data.get("data") or []],
            has_more=bool(data.get("has_more")),
            last_id=data.get("last_id"),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class EventPage:
    """One page of a job's transition log, oldest first."""

    data: list[JobEvent]
    has_more: bool

    @classmethod
    def from_json(cls, data: JSONObject) -> EventPage:
        return cls(
            data=[JobEvent.from_json(item) for item in data.get("data") or []],
            has_more=bool(data.get("has_more")),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class JobToken:
    """A job token (`POST /v1/jobs/{id}/tokens`): hand `token` to a browser or a phone, which
    may then act on job `job_id` within `scopes` until `expires_at` (Unix seconds), and on
    nothing else (`Client(base_url, token=...)`, or `?token=` in a URL)."""

    token: str
    job_id: str
    scopes: tuple[str, ...]
    expires_at: int

    @classmethod
    def from_json(cls, data: JSONObject) -> JobToken:
        return cls(
            token=str(data["token"]),
            job_id=str(data["job_id"]),
            scopes=tuple(str(scope) for scope in data.get("scopes") or ()),
            expires_at=int(data["expires_at"]),
        )


def output_text(result: JSONObject | None) -> str | None:
    """The model's text in a Chat Completions, Anthropic Messages or Responses body."""
    if not isinstance(result, dict):
        return None
    choices = result.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        message = choices[0].get("message")
        if isinstance(message, dict) and isinstance(message.get("content"), str):
            return str(message["content"])
    parts: list[str] = []
    content = result.get("content")  # Anthropic Messages
    if isinstance(content, list):
        parts += [str(b["text"]) for b in content if isinstance(b, dict) and "text" in b]
    output = result.get("output")  # Responses
    if isinstance(output, list):
        for item in output:
            for block in (item.get("content") or []) if isinstance(item, dict) else []:
                if isinstance(block, dict) and isinstance(block.get("text"), str):
                    parts.append(block["text"])
    return "".join(parts) if parts else None


class OutputDelta(str):
    """A piece of a job's live output (`Client.stream`): the text itself, plus `seq` (its place
    in the job's output log) and `reset`: True on the first delta of a new attempt, whose text
    replaces everything received before it (a retried or reclaimed job starts over).

    `continued_chars` (on a reset delta only; else 0): the new attempt continues the text so
    far (`on_retry="continue"`) and this delta begins with its first `continued_chars`
    characters again. Replacing the text with the new attempt's, as for any reset, gives the
    right text; a display that keeps its text keeps that many characters of it instead and
    appends this delta from that point on: `text = text[:n] + delta[n:]`."""

    __slots__ = ("continued_chars", "reset", "seq")
    seq: int
    reset: bool
    continued_chars: int

    def __new__(
        cls, text: str, *, seq: int, reset: bool = False, continued_chars: int = 0
    ) -> OutputDelta:
        delta = super().__new__(cls, text)
        delta.seq = seq
        delta.reset = reset
        delta.continued_chars = continued_chars
        return delta
