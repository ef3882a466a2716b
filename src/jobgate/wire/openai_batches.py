"""OpenAI's Batch API, the pure part: the statuses, an input file's lines and their check as
OpenAI validates a batch, the output and error lines, and the batch's usage as OpenAI shows it."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterator
from typing import Any

import orjson

CHAT = "/v1/chat/completions"
RESPONSES = "/v1/responses"
ENDPOINTS = (CHAT, RESPONSES, "/v1/embeddings", "/v1/completions")
COMPLETION_WINDOWS = {"24h": 24 * 3600.0}
MAX_CUSTOM_ID = 512
MAX_ERRORS = 100  # a failed validation lists at most this many of its lines' errors
LINE_MEMBERS = frozenset({"custom_id", "method", "url", "body"})


class BatchStatus(enum.StrEnum):
    VALIDATING = "validating"  # created; the batches role starts expanding it
    IN_PROGRESS = "in_progress"  # lines are jobs (or being turned into jobs)
    FINALIZING = "finalizing"  # every job ended (or the window passed): files being written
    COMPLETED = "completed"
    FAILED = "failed"  # the input could not be used at all
    EXPIRED = "expired"  # the completion window passed first; finished lines are kept
    CANCELLING = "cancelling"  # cancel asked: queued jobs cancelled, running ones stopping
    CANCELLED = "cancelled"


LIVE = (BatchStatus.VALIDATING, BatchStatus.IN_PROGRESS, BatchStatus.FINALIZING,
        BatchStatus.CANCELLING)  # fmt: skip


class LineError(Exception):
    """A line of an input file that cannot be used (OpenAI's `errors.data` entry)."""

    def __init__(self, line: int, code: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.line = line
        self.code = code
        self.message = message
        self.param = param

    def view(self) -> dict[str, Any]:
        """OpenAI's `errors.data` entry (a line number of 0: the file as a whole)."""
        line = self.line or None
        return {"code": self.code, "message": self.message, "param": self.param, "line": line}


def chunk_lines(data: bytes, first_line: int) -> Iterator[tuple[int, bytes]]:
    """The requests of a stored chunk of whole lines: (its line number in the file, counted
    from 1, the line without its end), blank lines skipped (they carry no request)."""
    for offset, raw in enumerate(data.split(b"\n")):
        line = raw.removesuffix(b"\r")
        if line.strip():
            yield first_line + offset, line


def parse_line(raw: bytes, line: int) -> dict[str, Any]:
    """One input line checked as OpenAI checks it: a JSON object with a string `custom_id`,
    `method` POST, a supported `url` and an object `body`. Raises LineError."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise LineError(
            line, "invalid_json_line", f"line {line}: this line is not parseable as valid JSON"
        ) from None
    if not isinstance(value, dict):
        raise LineError(line, "invalid_json_line", f"line {line}: this line is not a JSON object")
    custom_id = value.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id or len(custom_id) > MAX_CUSTOM_ID:
        raise LineError(
            line,
            "missing_required_parameter",
            f"line {line}: custom_id must be a string of 1-{MAX_CUSTOM_ID} characters",
            "custom_id",
        )
    if value.get("method") != "POST":
        raise LineError(line, "invalid_value", f"line {line}: method must be POST", "method")
    if value.get("url") not in ENDPOINTS:
        raise LineError(
            line,
            "invalid_url",
            f"line {line}: url must be one of {', '.join(ENDPOINTS)}",
            "url",
        )
    if not isinstance(value.get("body"), dict):
        raise LineError(line, "invalid_value", f"line {line}: body must be an object", "body")
    unknown = set(value) - LINE_MEMBERS
    if unknown:
        raise LineError(line, "invalid_value", f"line {line}: unknown field {sorted(unknown)[0]!r}")
    return value


@dataclasses.dataclass
class Validation:
    """An input file checked line by line against its batch, as OpenAI validates a batch:
    each line a request (parse_line), every url the batch's endpoint, every custom_id once,
    every model the same. A model named with a provider's prefix (`PROVIDER/MODEL`, one of
    `providers`) is the same model as without it: the prefix chooses who serves that line,
    so one batch may run on several providers. Feed it the lines in order (`check`), then
    read `errors`."""

    endpoint: str
    max_lines: int
    providers: frozenset[str] = frozenset()
    lines: int = 0
    model: str | None = None
    errors: list[LineError] = dataclasses.field(default_factory=list)
    _seen: set[str] = dataclasses.field(default_factory=set)
    _refused: int = 0

    def check(self, raw: bytes, line: int) -> None:
        self.lines += 1
        if self.lines > self.max_lines:
            return  # counted; refused once at the end (finish)
        try:
            value = parse_line(raw, line)
            custom_id = value["custom_id"]
            if custom_id in self._seen:
                raise LineError(
                    line,
                    "duplicate_custom_id",
                    f"line {line}: the custom_id of this request is a duplicate of another "
                    "request's; custom_id must be unique within a batch",
                    "custom_id",
                )
            self._seen.add(custom_id)
            if value["url"] != self.endpoint:
                raise LineError(
                    line,
                    "url_mismatch",
                    f"line {line}: url {value['url']!r} does not match the batch's endpoint "
                    f"{self.endpoint!r}",
                    "url",
                )
            model = value["body"].get("model")
            if isinstance(model, str):
                model = self._unprefixed(model)
                if self.model is None:
                    self.model = model
                elif model != self.model:
                    raise LineError(
                        line,
                        "model_mismatch",
                        f"line {line}: model {model!r} differs from the batch's model "
                        f"{self.model!r}; a batch's requests all use one model",
                        "body.model",
                    )
        except LineError as exc:
            self._refused += 1
            if len(self.errors) < MAX_ERRORS:
                self.errors.append(exc)

    def _unprefixed(self, model: str) -> str:
        head, slash, rest = model.partition("/")
        return rest if slash and head in self.providers else model

    def finish(self) -> list[LineError]:
        """The errors that fail the batch (none: it may run)."""
        if self.lines == 0:
            return [LineError(0, "empty_file", "the input file has no requests", None)]
        if self.lines > self.max_lines:
            too_many = LineError(
                self.max_lines + 1,
                "too_many_lines",
                f"the input file has {self.lines} requests; a batch takes at most {self.max_lines}",
                None,
            )
            return [too_many, *self.errors][:MAX_ERRORS]
        return self.errors


@dataclasses.dataclass(frozen=True, slots=True)
class RequestCounts:
    """OpenAI's `request_counts`: lines in all, succeeded, failed (a line cancelled or expired
    before it ran counts as neither)."""

    total: int = 0
    completed: int = 0
    failed: int = 0

    def __add__(self, other: RequestCounts) -> RequestCounts:
        return RequestCounts(
            self.total + other.total,
            self.completed + other.completed,
            self.failed + other.failed,
        )


def request_id(job_id: str) -> str:
    return f"req_{job_id}"


def output_line(
    *, line_id: str, custom_id: str, job_id: str, status_code: int, body: Any
) -> dict[str, Any]:
    """A line of the output or error file for a request that got an HTTP answer."""
    return {
        "id": line_id,
        "custom_id": custom_id,
        "response": {"status_code": status_code, "request_id": request_id(job_id), "body": body},
        "error": None,
    }


def error_line(*, line_id: str, custom_id: str, code: str, message: str) -> dict[str, Any]:
    """A line of the error file for a request that never got an answer."""
    return {
        "id": line_id,
        "custom_id": custom_id,
        "response": None,
        "error": {"code": code, "message": message},
    }


def failed_status_code(error: dict[str, Any] | None) -> int | None:
    """The HTTP status a failed job's provider answered, if it answered one."""
    if not error:
        return None
    status = error.get("status_code")
    return status if isinstance(status, int) and 400 <= status <= 599 else None


NOT_RUN = {
    "cancelled": ("batch_cancelled", "This request was cancelled before it completed."),
    "expired": (
        "batch_expired",
        "This request could not be executed before the completion window expired.",
    ),
}


def usage_view(input_tokens: int, output_tokens: int, cached_tokens: int) -> dict[str, Any]:
    """A batch's `usage` as OpenAI shows it (its lines' usage summed). jobgate's usage does not
    break out reasoning tokens: 0."""
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached_tokens},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }
