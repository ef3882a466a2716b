"""AdminStore on SQLite: what operators see across tenants."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime

import orjson

from jobgate import errors
from jobgate.domain.job import Job
from jobgate.domain.states import JobState
from jobgate.storage import sql
from jobgate.storage.records import EndpointHealth, TenantOverview
from jobgate.storage.rows import RowDecoder, unix_time
from jobgate.storage.sqlite.database import SqliteDatabase

Q = sql.load("jobgate.storage.sqlite")


class SqliteAdmin:
    """Mixed into SqliteStorage, which supplies `_db`, `_decode` and `_now`."""

    _db: SqliteDatabase
    _decode: RowDecoder

    def _now(self, now: datetime | None) -> float:
        raise NotImplementedError

    async def operator_key_create(
        self,
        *,
        key_id: str,
        name: str,
        key_hash: str,
        key_prefix: str,
        now: datetime | None = None,
    ) -> None:
        params = {
            "id": key_id,
            "name": name,
            "key_hash": key_hash,
            "key_prefix": key_prefix,
            "now": self._now(now),
        }
        await self._db.write(lambda conn: conn.execute(Q["operator_key_insert"].sql, params))

    async def operator_key_name(self, *, key_hash: str) -> str | None:
        row = await self._db.read(
            lambda conn: conn.execute(Q["operator_key_name"].sql, {"key_hash": key_hash}).fetchone()
        )
        return None if row is None else str(row["name"])

    async def operator_key_count(self) -> int:
        row = await self._db.read(lambda conn: conn.execute(Q["operator_key_count"].sql).fetchone())
        return int(row["keys"])

    async def admin_overview(self, *, now: datetime | None = None) -> list[TenantOverview]:
        rows = await self._db.read(
            lambda conn: conn.execute(Q["admin_overview"].sql, {"now": self._now(now)}).fetchall()
        )
        return [
            TenantOverview(
                tenant_id=row["tenant_id"],
                tenant_name=row["tenant_name"],
                queued=row["queued"],
                running=row["running"],
                oldest_due_at=unix_time(row["oldest_due_at"]),  # clamped: never raises
                dead_lettered=row["dead_lettered"],
            )
            for row in rows
        ]

    async def admin_job_list(
        self,
        *,
        tenant_id: str | None = None,
        states: Sequence[JobState] | None = None,
        dead_lettered: bool | None = None,
        after: str | None = None,
        limit: int = 50,
    ) -> list[Job]:
        def read(conn: sqlite3.Connection) -> list[Job]:
            after_created_at = after_id = None
            if after is not None:
                anchor = conn.execute(Q["job_get"].sql, {"id": after}).fetchone()
                if anchor is None:
                    raise errors.InvalidRequest(f"no job with id {after!r}", param="after")
                after_created_at, after_id = anchor["created_at"], anchor["id"]
            rows = conn.execute(
                Q["admin_job_list"].sql,
                {
                    "tenant_id": tenant_id,
                    "states": None
                    if states is None
                    else orjson.dumps([str(s) for s in states]).decode(),
                    "dead_lettered": dead_lettered,
                    "after_created_at": after_created_at,
                    "after_id": after_id,
                    "limit": limit,
                },
            ).fetchall()
            return [self._decode.job(row) for row in rows]

        return await self._db.read(read)

    async def admin_endpoint_health(self) -> list[EndpointHealth]:
        rows = await self._db.read(
            lambda conn: conn.execute(Q["admin_endpoint_health"].sql).fetchall()
        )
        return [
            EndpointHealth(
                endpoint_id=row["endpoint_id"],
                tenant_name=row["tenant_name"],
                url=row["url"],
                disabled=bool(row["disabled"]),
                disabled_reason=row["disabled_reason"],
                pending=int(row["pending"]),
                succeeded=int(row["succeeded"]),
                failed=int(row["failed"]),
                last_status_code=row["last_status_code"],
                last_error=row["last_error"],
            )
            for row in rows
        ]
