"""SQLite's own retention batch: several statements in one transaction, as SQLite has no
data-modifying CTE (PostgreSQL deletes a batch in one statement, store/retention.py)."""

from __future__ import annotations

import sqlite3

from jobgate.storage.records import PartitionDrops, RetentionBatch
from jobgate.storage.sqlite.database import SqliteDatabase
from jobgate.storage.sqlite.executor import Q, json_text
from jobgate.storage.transaction_requests import (
    BatchUsageWrite,
    PartitionsDrop,
    PartitionsEnsure,
    RetentionWrite,
    record_params,
)


class SqliteRetentionWrites:
    _db: SqliteDatabase

    async def retention_write(self, request: RetentionWrite) -> RetentionBatch:
        """Pick the jobs, sum their usage into usage_daily (and, of jobs
        with a concurrency key, usage_daily_keys), then delete them and their rows."""
        params = record_params(request)

        def delete(conn: sqlite3.Connection) -> RetentionBatch:
            ids = [row["id"] for row in conn.execute(Q["retention_pick"].sql, params)]
            if not ids:
                return RetentionBatch()
            batch = {"ids": json_text(ids)}
            conn.execute(Q["retention_rollup"].sql, batch)
            conn.execute(Q["retention_rollup_keys"].sql, batch)

            def rows(name: str) -> int:
                return conn.execute(Q[name].sql, batch).rowcount

            return RetentionBatch(
                usage_ledger=rows("retention_delete_usage"),
                job_events=rows("retention_delete_events"),
                webhook_attempts=rows("retention_delete_attempts"),
                outbox=rows("retention_delete_outbox"),
                jobs=rows("retention_delete_jobs"),
            )

        return await self._db.write(delete)

    async def batch_usage_write(self, request: BatchUsageWrite) -> int:
        """Pick the rows, sum them into usage_daily_batches, then delete them."""
        params = record_params(request)

        def roll(conn: sqlite3.Connection) -> int:
            ids = [
                row["job_id"] for row in conn.execute(Q["retention_batch_usage_pick"].sql, params)
            ]
            if not ids:
                return 0
            picked = {"ids": json_text(ids)}
            conn.execute(Q["retention_batch_usage_rollup"].sql, picked)
            return int(conn.execute(Q["retention_batch_usage_delete"].sql, picked).rowcount)

        return await self._db.write(roll)

    async def partitions_ensure(self, request: PartitionsEnsure) -> int:
        """SQLite's history tables are single tables: nothing to make."""
        return 0

    async def partitions_drop(self, request: PartitionsDrop) -> PartitionDrops:
        """SQLite's history tables are single tables: retention deletes their rows."""
        return PartitionDrops()
