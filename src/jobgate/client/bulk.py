"""Request building and answer parsing for `submit_many` (shared by Client and AsyncClient)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from jobgate.client import errors
from jobgate.client.journal import new_operation_id
from jobgate.client.models import Job

BULK_PATH = "/v1/jobs/bulk"
MAX_PER_CALL = 1000  # the server's bound; longer inputs are sent in several calls
HEADERS = {"Content-Type": "application/json"}

# One item's answer: its job, or the problem that refused it alone.
BulkResult = Job | errors.APIStatusError


def calls(items: Iterable[Mapping[str, Any]]) -> Iterator[bytes]:
    """The bodies of the calls that submit `items`, at most MAX_PER_CALL items each. An item
    without an `idempotency_key` gets a fresh one, so a call whose answer was lost is safe
    to send again (every item replays)."""
    chunk: list[dict[str, Any]] = []
    for item in items:
        if "endpoint" not in item or "body" not in item:
            raise ValueError("each item needs 'endpoint' and 'body'")
        entry = {name: value for name, value in item.items() if value is not None}
        entry.setdefault("idempotency_key", new_operation_id())
        chunk.append(entry)
        if len(chunk) == MAX_PER_CALL:
            yield _encode(chunk)
            chunk = []
    if chunk:
        yield _encode(chunk)


def _encode(chunk: list[dict[str, Any]]) -> bytes:
    return json.dumps({"jobs": chunk}, separators=(",", ":"), ensure_ascii=False).encode()


def results(payload: Any) -> list[BulkResult]:
    """The per-item answers of one call, in order."""
    out: list[BulkResult] = []
    for entry in payload["data"]:
        if entry.get("object") == "error":
            error = entry.get("error") or {}
            status = int(entry.get("status") or 400)
            code = str(entry.get("code") or error.get("code") or f"http_{status}")
            cls = errors.error_class(status, code)
            out.append(
                cls(
                    str(error.get("message") or code),
                    status=status,
                    code=code,
                    type=f"/problems/{code}",
                    title=code,
                    param=error.get("param"),
                    body=entry,
                )
            )
        else:
            out.append(Job.from_json(entry))
    return out
