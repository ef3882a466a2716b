"""Logs for people and machines: one JSON object per line, or on a terminal one readable
(coloured) line; both carry ids but never keys, secrets or prompts.

Callers pass facts as `extra={...}`; only names in SAFE_FIELDS are written, so a stray
`extra={"body": ...}` cannot leak prompt content into the log.
"""

from __future__ import annotations

import logging
import os
import sys
from datetime import UTC, datetime
from typing import Any, Literal

import orjson

SAFE_FIELDS = frozenset({
    "job_id", "tenant_id", "worker_id", "provider", "endpoint", "model", "from_state",
    "to_state", "reason", "actor", "attempt", "max_attempts", "error_code", "status_code",
    "count", "requeued", "failed", "cancelled", "expired", "delivery_id", "event_type",
    "endpoint_id", "latency_ms", "retry_in_s", "role", "url_host", "database", "port", "host",
    "version", "versions", "roles", "phase", "provider_job_id", "elapsed_s", "method", "path",
    "detail", "traceback",  # a poison job's column names and frames (services.poison_log)
})  # fmt: skip
LogFormat = Literal["auto", "human", "json"]

_LEVEL_COLOURS = {"DEBUG": "2", "INFO": "36", "WARNING": "33", "ERROR": "31", "CRITICAL": "1;31"}


def _facts(record: logging.LogRecord) -> dict[str, Any]:
    return {
        field: value
        for field in sorted(SAFE_FIELDS)
        if (value := record.__dict__.get(field)) is not None
    }


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(_facts(record))
        if record.exc_info and record.exc_info[0] is not None:
            entry["exception"] = record.exc_info[0].__name__
        return orjson.dumps(entry, default=str).decode()


class HumanFormatter(logging.Formatter):
    """`14:02:03 WARNING worker  message  job_id=job_… attempt=2`, coloured by level."""

    def __init__(self, *, colour: bool) -> None:
        super().__init__()
        self.colour = colour

    def format(self, record: logging.LogRecord) -> str:
        when = datetime.fromtimestamp(record.created, UTC).strftime("%H:%M:%S")
        level = f"{record.levelname:<7}"
        if self.colour:
            level = f"\x1b[{_LEVEL_COLOURS.get(record.levelname, '0')}m{level}\x1b[0m"
        source = record.name.removeprefix("jobgate.")
        # An access line says it all in its message; its fields are for machines.
        shown = {} if record.name == "jobgate.access" else _facts(record)
        facts = " ".join(f"{key}={value}" for key, value in shown.items())
        if record.exc_info and record.exc_info[0] is not None:
            facts = f"{facts} exception={record.exc_info[0].__name__}".strip()
        if facts and self.colour:
            facts = f"\x1b[2m{facts}\x1b[0m"
        return f"{when} {level} {source}: {record.getMessage()}" + (f"  {facts}" if facts else "")


def is_terminal(stream: Any) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def formatter_for(log_format: LogFormat, stream: Any) -> logging.Formatter:
    """JSON unless asked for people, or `auto` on a terminal; colour only on a terminal and
    without NO_COLOR."""
    terminal = is_terminal(stream)
    if log_format == "json" or (log_format == "auto" and not terminal):
        return JsonFormatter()
    return HumanFormatter(colour=terminal and not os.environ.get("NO_COLOR"))


def configure(
    level: str = "info",
    *,
    stream: Any = None,
    log_format: LogFormat = "auto",
    access_log: bool = False,
) -> None:
    stream = stream or sys.stderr
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter_for(log_format, stream))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("uvicorn.access", "httpx"):  # httpx logs every provider request at info
        logging.getLogger(noisy).setLevel(logging.WARNING)
    logging.getLogger("jobgate.access").setLevel(logging.INFO if access_log else logging.WARNING)
