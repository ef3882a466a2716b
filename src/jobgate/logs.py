"""Structured logs: one JSON object per line, with ids but never keys, secrets or prompts.

Callers pass facts as `extra={...}`; only names in SAFE_FIELDS are written, so a stray
`extra={"body": ...}` cannot leak prompt content into the log.
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from typing import Any

import orjson

SAFE_FIELDS = frozenset({
    "job_id", "tenant_id", "worker_id", "provider", "endpoint", "model", "from_state",
    "to_state", "reason", "actor", "attempt", "max_attempts", "error_code", "status_code",
    "count", "requeued", "failed", "cancelled", "expired", "delivery_id", "event_type",
    "endpoint_id", "latency_ms", "retry_in_s", "role", "url_host", "database", "port", "host",
    "version", "versions", "roles", "phase", "provider_job_id", "elapsed_s",
    "detail", "traceback",  # a poison job's column names and frames (shared.traceback_text)
})  # fmt: skip


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for field in SAFE_FIELDS:
            value = record.__dict__.get(field)
            if value is not None:
                entry[field] = value
        if record.exc_info and record.exc_info[0] is not None:
            entry["exception"] = record.exc_info[0].__name__
        return orjson.dumps(entry, default=str).decode()


def configure(level: str = "info", *, stream: Any = None) -> None:
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("uvicorn.access", "httpx"):  # httpx logs every provider request at info
        logging.getLogger(noisy).setLevel(logging.WARNING)
