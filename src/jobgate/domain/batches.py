"""OpenAI's Batch API, the pure part: the statuses, one input line's check, the output and
error lines, and the batch object as OpenAI shows it."""

from __future__ import annotations

import enum
from typing import Any

import orjson

ENDPOINTS = ("/v1/chat/completions", "/v1/responses")
COMPLETION_WINDOWS = {"24h": 24 * 3600.0}
MAX_CUSTOM_ID = 512


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
        return {"code": self.code, "message": self.message, "param": self.param, "line": self.line}


def parse_line(raw: bytes, line: int) -> dict[str, Any]:
    """One input line checked as OpenAI checks it: a JSON object with a string `custom_id`,
    `method` POST, a supported `url` and an object `body`. Raises LineError."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise LineError(line, "invalid_json_line", f"line {line} is not valid JSON") from None
    if not isinstance(value, dict):
        raise LineError(line, "invalid_json_line", f"line {line} is not a JSON object")
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
    unknown = set(value) - {"custom_id", "method", "url", "body"}
    if unknown:
        raise LineError(line, "invalid_value", f"line {line}: unknown field {sorted(unknown)[0]!r}")
    return value


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
