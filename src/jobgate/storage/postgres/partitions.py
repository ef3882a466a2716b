"""The history's day partitions on PostgreSQL (migration 0088): made ahead, and dropped once
retention allows. Each partition is made or dropped in a transaction of its own, by the
migration's functions, which serialise concurrent callers and never wait long for a lock."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, date, timedelta

from jobgate.storage.postgres.executor import PostgresExecutor
from jobgate.storage.records import PartitionDrops
from jobgate.storage.transaction_requests import PartitionsDrop, PartitionsEnsure

HISTORY_TABLES = ("job_events", "job_output_chunks", "outbox", "webhook_attempts")
# Making a partition waits this long for DEFAULT's lock; detaching one for its table's, which
# holds every write to that table back while it waits: a busy lock leaves it to a later pass.
ENSURE_LOCK_TIMEOUT = "2s"
DROP_LOCK_TIMEOUT = "500ms"


async def history_days(sql: PostgresExecutor) -> dict[str, list[date]]:
    """Each history table's day partitions."""
    days: dict[str, list[date]] = defaultdict(list)
    for row in await sql.read("history_partitions"):
        days[row["parent"]].append(row["day"])
    return days


class PostgresPartitionWrites:
    _sql: PostgresExecutor

    async def partitions_ensure(self, request: PartitionsEnsure) -> int:
        days_ahead, now = request.days_ahead, request.now
        today = now.astimezone(UTC).date()
        wanted = [today + timedelta(days=ahead) for ahead in range(days_ahead + 1)]
        existing = await history_days(self._sql)
        made = 0
        for table in HISTORY_TABLES:
            for day in wanted:
                if day in existing[table]:
                    continue
                row = await self._sql.write_one(
                    "history_partition_ensure",
                    parent=table,
                    day=day,
                    lock_timeout=ENSURE_LOCK_TIMEOUT,
                )
                made += bool(row is not None and row["made"])
        return made

    async def partitions_drop(self, request: PartitionsDrop) -> PartitionDrops:
        horizon, max_kept = request.horizon, request.max_kept
        # A day's partition holds the history of the jobs created that day: past retention
        # once the whole day is before the horizon (its jobs' own rules are checked in the drop).
        last_day = horizon.completed_before.astimezone(UTC).date() - timedelta(days=1)
        dropped = moved = blocked = 0
        for table, days in (await history_days(self._sql)).items():
            for day in days:
                if day > last_day:
                    continue
                row = await self._sql.write_one(
                    "history_partition_drop",
                    parent=table,
                    day=day,
                    max_kept=max_kept,
                    lock_timeout=DROP_LOCK_TIMEOUT,
                )
                outcome = None if row is None else row["moved"]
                if outcome is None:
                    continue
                if outcome < 0:
                    blocked += 1
                else:
                    dropped += 1
                    moved += outcome
        return PartitionDrops(dropped=dropped, moved_rows=moved, blocked=blocked)
