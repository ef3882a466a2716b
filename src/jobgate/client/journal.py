"""The operation journal: a local SQLite record of every submit, written before it is sent.

A submit is recorded (`pending`) under a fresh operation id, and that id is the request's
Idempotency-Key. When the answer arrives the job id is stored (`accepted`, then `finished` once
the job is terminal). After a crash the journal knows which submits may or may not have reached
the server, and re-sending one with the same key is safe: the server answers the original job.

States: pending (outcome unknown) → accepted (job id known) → finished (job terminal);
pending → rejected (the server refused the request itself: 400, 413, 422);
pending → stale (older than the server keeps idempotency keys: re-sending could run it twice,
so the client stops and a person decides).

The journal is one writer at a time (SQLite); several processes may share a file.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
import threading
import uuid
from typing import Any

from jobgate.client.errors import APIStatusError
from jobgate.client.models import TERMINAL_STATUSES, Job

SCHEMA_VERSION = 1
UNFINISHED = ("pending", "accepted")
# The server keeps idempotency keys for at least 24 h; stop re-sending an hour before that.
KEY_TTL_S = 23 * 3600.0
_REJECTED_STATUSES = frozenset({400, 413, 422})
_NOW = "((julianday('now') - 2440587.5) * 86400.0)"  # SQLite's clock, in Unix seconds

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS operations (
    id          TEXT PRIMARY KEY,      -- the operation id, sent as Idempotency-Key
    kind        TEXT NOT NULL,         -- 'submit'
    base_url    TEXT NOT NULL,         -- the server it was sent to
    request     TEXT NOT NULL,         -- the exact JSON body, re-sent byte for byte
    state       TEXT NOT NULL,         -- pending | accepted | finished | rejected | stale
    job_id      TEXT,
    job_status  TEXT,
    error       TEXT,                  -- JSON (status, code, message) when rejected
    sends       INTEGER NOT NULL DEFAULT 0,
    created_at  REAL NOT NULL DEFAULT {_NOW},
    updated_at  REAL NOT NULL DEFAULT {_NOW}
);
CREATE INDEX IF NOT EXISTS operations_unfinished
    ON operations (base_url, created_at) WHERE state IN ('pending', 'accepted');
CREATE INDEX IF NOT EXISTS operations_job ON operations (job_id) WHERE job_id IS NOT NULL;
"""


def new_operation_id() -> str:
    """A fresh operation id, usable as an Idempotency-Key."""
    return f"op_{uuid.uuid4().hex}"


@dataclasses.dataclass(frozen=True, slots=True)
class Operation:
    """One journaled submit. `job` is filled in by `resume()` with the server's answer."""

    id: str
    kind: str
    base_url: str
    request_json: str = dataclasses.field(repr=False)  # the exact body that was sent
    state: str
    job_id: str | None
    job_status: str | None
    error: dict[str, Any] | None
    sends: int
    created_at: float
    updated_at: float
    job: Job | None = None

    @property
    def request(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.request_json)
        return parsed

    @property
    def unfinished(self) -> bool:
        return self.state in UNFINISHED


class Journal:
    """A SQLite file of operations. Each write is durable (synchronous=FULL) before it returns,
    so an operation recorded before a send survives a crash of this process or the machine."""

    def __init__(self, path: str | os.PathLike[str], *, key_ttl_s: float = KEY_TTL_S) -> None:
        self.path = os.fspath(path)
        self.key_ttl_s = key_ttl_s
        self._lock = threading.Lock()
        # Autocommit; calls come from one thread at a time (the lock), possibly not the same one.
        self._db = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, timeout=10.0
        )
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        if self._db.execute("PRAGMA user_version").fetchone()[0] < SCHEMA_VERSION:
            self._db.executescript(_SCHEMA)
            self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- writes -------------------------------------------------------------------------

    def record_send(self, op_id: str, *, base_url: str, request: bytes) -> None:
        """Durably note that a submit is about to be sent (call it before every send)."""
        self._write(
            f"""INSERT INTO operations (id, kind, base_url, request, state, sends)
                VALUES (?, 'submit', ?, ?, 'pending', 1)
                ON CONFLICT (id) DO UPDATE SET sends = sends + 1, updated_at = {_NOW}""",
            (op_id, base_url, request.decode()),
        )

    def record_job(self, op_id: str, job: Job) -> None:
        """The server answered the submit with `job`."""
        self._write(
            f"""UPDATE operations SET job_id = ?, job_status = ?, state = ?, error = NULL,
                       updated_at = {_NOW}
                WHERE id = ?""",
            (job.id, job.status, _state_for(job.status), op_id),
        )

    def record_refusal(self, op_id: str, error: APIStatusError) -> None:
        """The server refused the submit. Only a refusal of the request itself is final; a
        rate limit, an outage or a bad key leaves the operation pending for resume()."""
        if error.status not in _REJECTED_STATUSES:
            return
        detail = json.dumps({"status": error.status, "code": error.code, "message": error.message})
        self._write(
            f"""UPDATE operations SET state = 'rejected', error = ?, updated_at = {_NOW}
                WHERE id = ? AND state = 'pending'""",
            (detail, op_id),
        )

    def record_status(self, job: Job) -> None:
        """Keep a journaled job's status current (no write when it has not changed)."""
        self._write(
            f"""UPDATE operations SET job_status = ?, state = ?, updated_at = {_NOW}
                WHERE job_id = ? AND job_status IS NOT ? AND state IN ('accepted', 'finished')""",
            (job.status, _state_for(job.status), job.id, job.status),
        )

    def record_missing(self, op_id: str) -> None:
        """The server no longer knows the job (removed after retention)."""
        detail = json.dumps({"status": 404, "code": "not_found", "message": "job not found"})
        self._write(
            f"""UPDATE operations SET state = 'finished', error = ?, updated_at = {_NOW}
                WHERE id = ?""",
            (detail, op_id),
        )

    def mark_stale_pending(self, base_url: str) -> int:
        """Pending operations older than the server's key retention become `stale`."""
        with self._lock:
            cursor = self._db.execute(
                f"""UPDATE operations SET state = 'stale', updated_at = {_NOW}
                    WHERE base_url = ? AND state = 'pending' AND created_at < {_NOW} - ?""",
                (base_url, self.key_ttl_s),
            )
            return cursor.rowcount

    def prune(self, *, older_than_s: float) -> int:
        """Forget settled operations last touched more than `older_than_s` ago."""
        with self._lock:
            cursor = self._db.execute(
                f"""DELETE FROM operations WHERE state NOT IN ('pending', 'accepted')
                    AND updated_at < {_NOW} - ?""",
                (older_than_s,),
            )
            return cursor.rowcount

    # -- reads --------------------------------------------------------------------------

    def get(self, op_id: str) -> Operation | None:
        rows = self._read("SELECT * FROM operations WHERE id = ?", (op_id,))
        return rows[0] if rows else None

    def unfinished(self, base_url: str) -> list[Operation]:
        """Operations sent to `base_url` whose outcome or job is not settled, oldest first."""
        return self._read(
            """SELECT * FROM operations WHERE base_url = ? AND state IN ('pending', 'accepted')
               ORDER BY created_at, id""",
            (base_url,),
        )

    def operations(self, *, limit: int = 100) -> list[Operation]:
        """The most recent operations, newest first."""
        return self._read(
            "SELECT * FROM operations ORDER BY created_at DESC, id DESC LIMIT ?", (limit,)
        )

    # -- plumbing -----------------------------------------------------------------------

    def _write(self, sql: str, params: tuple[Any, ...]) -> None:
        with self._lock:
            self._db.execute(sql, params)

    def _read(self, sql: str, params: tuple[Any, ...]) -> list[Operation]:
        with self._lock:
            rows = self._db.execute(sql, params).fetchall()
        return [_operation(row) for row in rows]


def _state_for(status: str) -> str:
    return "finished" if status in TERMINAL_STATUSES else "accepted"


def _operation(row: sqlite3.Row) -> Operation:
    return Operation(
        id=row["id"],
        kind=row["kind"],
        base_url=row["base_url"],
        request_json=row["request"],
        state=row["state"],
        job_id=row["job_id"],
        job_status=row["job_status"],
        error=json.loads(row["error"]) if row["error"] else None,
        sends=row["sends"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )
