"""BulkStore on PostgreSQL: a chunk is picked (FOR UPDATE, in id order) and changed by id in
one transaction; the job triggers log each change and NOTIFY the workers."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

import asyncpg

from jobgate import errors
from jobgate.domain.bulk import BulkAction, JobFilter
from jobgate.storage import base
from jobgate.storage.records import BulkChunk

T = TypeVar("T")

_UPDATE = {
    BulkAction.CANCEL: "job_bulk_cancel",
    BulkAction.REDRIVE: "job_bulk_redrive",
    BulkAction.DELETE: "job_bulk_delete",
}


_DEADLOCK_ATTEMPTS = 3


def _same(value: Any) -> Any:
    return value


class PostgresBulk:
    """Mixed into PostgresStorage, which supplies the query helpers."""

    async def _fetchrow(self, query_name: str, /, **params: Any) -> asyncpg.Record | None:
        raise NotImplementedError

    async def _with_conn(
        self, work: Callable[[Any], Awaitable[T]], *, transaction: bool = False
    ) -> T:
        raise NotImplementedError

    @staticmethod
    async def _run(conn: Any, query_name: str, /, **params: Any) -> list[asyncpg.Record]:
        raise NotImplementedError

    def _bulk_published(self, action: BulkAction, changed: Sequence[tuple[str, str]]) -> None:
        raise NotImplementedError

    async def job_bulk_count(
        self, *, where: JobFilter, action: BulkAction, now: datetime | None = None
    ) -> int:
        params = base.bulk_filter_params(where, action, time=_same, json=_same)
        row = await self._fetchrow("job_bulk_count", **params)
        return 0 if row is None else int(row["jobs"])

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
        params = base.bulk_filter_params(where, action, time=_same, json=_same)

        async def apply(conn: Any) -> list[tuple[str, str]]:
            picked = await self._run(
                conn, "job_bulk_pick", after_id=after_id, limit=limit, **params
            )
            if not picked:
                return []
            ids = [row["id"] for row in picked]
            rows = await self._run(
                conn, _UPDATE[action], ids=ids, actor=actor, reason=reason, now=now
            )
            return sorted((row["id"], row["state"]) for row in rows)

        changed = await self._retrying_deadlocks(apply)
        self._bulk_published(action, changed)
        return BulkChunk([job_id for job_id, _ in changed], changed[-1][0] if changed else None)

    async def _retrying_deadlocks(self, work: Callable[[Any], Awaitable[T]]) -> T:
        """Run one chunk's transaction, again if PostgreSQL broke a deadlock by aborting it.

        A chunk locks its rows in id order, while a worker's heartbeat or batched finish locks
        the rows it holds in its own order: the two can wait on each other, and PostgreSQL
        then aborts one. The chunk rolled back whole, so running it again is safe; if it keeps
        losing, the caller gets StorageUnavailable (a 503 with Retry-After), never a 500."""
        for attempt in range(_DEADLOCK_ATTEMPTS):
            try:
                return await self._with_conn(work, transaction=True)
            except errors.StorageError as exc:
                if not isinstance(exc.__cause__, asyncpg.exceptions.DeadlockDetectedError):
                    raise
                if attempt == _DEADLOCK_ATTEMPTS - 1:
                    raise errors.StorageUnavailable(f"bulk chunk deadlocked: {exc}") from exc
        raise AssertionError("unreachable")
