"""BulkStore on SQLite: a chunk is picked and changed by id in one write operation (the single
writer keeps it consistent); the job triggers log each state change."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import orjson

from jobgate.domain.bulk import BulkAction, JobFilter
from jobgate.storage import base, sql
from jobgate.storage.records import BulkChunk
from jobgate.storage.sqlite.database import SqliteDatabase

Q = sql.load("jobgate.storage.sqlite")

_UPDATE = {
    BulkAction.CANCEL: "job_bulk_cancel",
    BulkAction.REDRIVE: "job_bulk_redrive",
    BulkAction.DELETE: "job_bulk_delete",
}


def _json(value: Any) -> str:
    return orjson.dumps(value).decode()


class SqliteBulk:
    """Mixed into SqliteStorage, which supplies `_db`, `_now` and `changes`."""

    _db: SqliteDatabase

    def _now(self, now: datetime | None) -> float:
        raise NotImplementedError

    def _filter(self, where: JobFilter, action: BulkAction) -> dict[str, Any]:
        def time(moment: datetime | None) -> float | None:
            return None if moment is None else moment.timestamp()

        return base.bulk_filter_params(where, action, time=time, json=_json)

    def _bulk_published(self, action: BulkAction, changed: Sequence[tuple[str, str]]) -> None:
        raise NotImplementedError

    async def job_bulk_count(
        self, *, where: JobFilter, action: BulkAction, now: datetime | None = None
    ) -> int:
        params = self._filter(where, action)
        row = await self._db.read(
            lambda conn: conn.execute(Q["job_bulk_count"].sql, params).fetchone()
        )
        return int(row["jobs"])

    async def job_bulk_apply(
        self,
        *,
        where: JobFilter,
        action: BulkAction,
        actor: str,
        reason: str,
        after_id: str | None,
        limit: int,
        now: datetime | None = None,
    ) -> BulkChunk:
        params = {**self._filter(where, action), "after_id": after_id, "limit": limit}
        at = self._now(now)

        def apply(conn: sqlite3.Connection) -> list[tuple[str, str]]:
            ids = [row["id"] for row in conn.execute(Q["job_bulk_pick"].sql, params)]
            if not ids:
                return []
            change = {"ids": _json(ids), "actor": actor, "reason": reason, "now": at}
            before = {}
            if action is BulkAction.DELETE:
                before = {
                    row["id"]: row
                    for row in conn.execute(Q["job_bulk_delete_before"].sql, change).fetchall()
                }
            rows = conn.execute(Q[_UPDATE[action]].sql, change).fetchall()
            for row in rows:
                old = before.get(row["id"])
                if old is None or (
                    old["state"] != row["state"]
                    or old["cancel_requested_at"] != row["cancel_requested_at"]
                ):
                    continue  # the trigger logged this change
                conn.execute(
                    Q["job_event_insert"].sql,
                    {
                        "job_id": row["id"],
                        "seq": row["event_seq"],
                        "from_state": old["state"],
                        "to_state": row["state"],
                        "actor": actor,
                        "reason": reason,
                        "applied": 1,
                        "now": at,
                    },
                )
            return sorted((row["id"], row["state"]) for row in rows)

        changed = await self._db.write(apply)
        self._bulk_published(action, changed)
        return BulkChunk([job_id for job_id, _ in changed], changed[-1][0] if changed else None)
