"""ConsoleStore on SQLite: what the operator console reads."""

from __future__ import annotations

import sqlite3
from datetime import datetime
from typing import Any

import orjson

from jobgate import errors
from jobgate.clock import from_unix
from jobgate.domain.bulk import BulkAction, JobFilter
from jobgate.domain.job import Job
from jobgate.domain.rollups import QueueDepth, Transition
from jobgate.domain.states import JobState
from jobgate.storage import base, sql
from jobgate.storage.rows import RowDecoder
from jobgate.storage.sqlite.database import SqliteDatabase

Q = sql.load("jobgate.storage.sqlite")


def _json(value: Any) -> str:
    return orjson.dumps(value).decode()


def _time(moment: datetime | None) -> float | None:
    return None if moment is None else moment.timestamp()


class SqliteConsole:
    """Mixed into SqliteStorage, which supplies `_db` and `_decode`."""

    _db: SqliteDatabase
    _decode: RowDecoder

    async def console_transitions(self, *, since: datetime, limit: int) -> list[Transition]:
        params = {"since": since.timestamp(), "limit": limit}
        rows = await self._db.read(
            lambda conn: conn.execute(Q["console_transitions"].sql, params).fetchall()
        )
        return [
            Transition(
                job_id=row["job_id"],
                tenant_id=row["tenant_id"],
                provider=row["provider"],
                from_state=None if row["from_state"] is None else JobState(row["from_state"]),
                to_state=JobState(row["to_state"]),
                reason=row["reason"],
                at=from_unix(row["at"]),
                queued_at=None if row["queued_at"] is None else from_unix(row["queued_at"]),
                run_at=from_unix(row["run_at"]),
            )
            for row in rows
        ]

    async def console_queue_depth(self) -> list[QueueDepth]:
        rows = await self._db.read(
            lambda conn: conn.execute(Q["console_queue_depth"].sql).fetchall()
        )
        return [QueueDepth(row["tenant_id"], row["provider"], int(row["queued"])) for row in rows]

    async def console_job_search(
        self,
        *,
        where: JobFilter,
        job_id: str | None = None,
        provider_job_id: str | None = None,
        after: str | None = None,
        limit: int = 50,
    ) -> list[Job]:
        def read(conn: sqlite3.Connection) -> list[Job]:
            if job_id is not None:
                row = conn.execute(Q["job_get"].sql, {"id": job_id}).fetchone()
                return [] if row is None else [self._decode.job(row)]
            if provider_job_id is not None:
                params = {"provider_job_id": provider_job_id, "limit": limit}
                rows = conn.execute(Q["console_job_by_provider_job_id"].sql, params).fetchall()
                return [self._decode.job(row) for row in rows]
            after_created_at = after_id = None
            if after is not None:
                anchor = conn.execute(Q["job_get"].sql, {"id": after}).fetchone()
                if anchor is None:
                    raise errors.InvalidRequest(f"no job with id {after!r}", param="after")
                after_created_at, after_id = anchor["created_at"], anchor["id"]
            params = base.bulk_filter_params(where, BulkAction.CANCEL, time=_time, json=_json)
            params |= {"after_created_at": after_created_at, "after_id": after_id, "limit": limit}
            rows = conn.execute(Q["console_job_search"].sql, params).fetchall()
            return [self._decode.job(row) for row in rows]

        return await self._db.read(read)
