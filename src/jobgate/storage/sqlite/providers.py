"""The provider store's transactions on SQLite (part of Transactions): three take several
statements in one write, as SQLite has no data-modifying CTE (PostgreSQL runs each as one
statement); other processes poll, and one writer needs no re-check."""

from __future__ import annotations

import sqlite3

from jobgate.domain.states import JobState
from jobgate.storage.executor import Row
from jobgate.storage.sqlite.database import SqliteDatabase
from jobgate.storage.sqlite.executor import Q
from jobgate.storage.transaction_requests import (
    DiscardWrite,
    DueRecheck,
    ProviderEventWrite,
    SettleWrite,
    record_params,
)

_COMPLETION = '["completion"]'
_COMPLETION_AND_REFUND = '["completion", "refund"]'


class SqliteProviderWrites:
    _db: SqliteDatabase

    async def notify_reconcilers(self) -> None:
        """Other processes poll."""

    async def recheck_due(self, request: DueRecheck) -> bool:
        """One writer: the first write saw everything."""
        return False

    async def settle_write(self, request: SettleWrite) -> Row | None:
        """Settle, then bill a final verdict's usage."""
        params = record_params(request)

        def settle(conn: sqlite3.Connection) -> Row | None:
            row: Row | None = conn.execute(Q["job_settle"].sql, params).fetchone()
            if row is not None and row["state"] != JobState.QUEUED:
                conn.execute(Q["usage_bill"].sql, {**params, "kinds": _COMPLETION})
            return row

        return await self._db.write(settle)

    async def discard_write(self, request: DiscardWrite) -> bool:
        """Stop watching, log the discarded result, then bill its usage and refund it."""
        params = record_params(request)

        def discard(conn: sqlite3.Connection) -> bool:
            if conn.execute(Q["job_discard_late_result"].sql, params).fetchone() is None:
                return False
            conn.execute(Q["job_discard_logged"].sql, params)
            conn.execute(Q["usage_bill"].sql, {**params, "kinds": _COMPLETION_AND_REFUND})
            return True

        return await self._db.write(discard)

    async def provider_event_write(self, request: ProviderEventWrite) -> tuple[bool, bool]:
        """Record the event, then (a first sighting) make its job due now."""
        params = record_params(request)

        def record(conn: sqlite3.Connection) -> tuple[bool, bool]:
            if conn.execute(Q["provider_event_insert"].sql, params).fetchone() is None:
                return False, False
            due = conn.execute(Q["job_reconcile_now"].sql, params).fetchone() is not None
            return True, due

        return await self._db.write(record)
