"""The storage seam on PostgreSQL (storage.transactions.Transactions): idempotency and admission
by statement (ON CONFLICT, the admission locks), claims by SKIP LOCKED with fair shares and caps
computed in SQL, verdicts applied set-wise by one statement that also bills the successes."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from jobgate.domain.job import Job
from jobgate.domain.states import JobState
from jobgate.domain.verdicts import Finish, reap_verdict_or_poison
from jobgate.storage.base import finish_payload
from jobgate.storage.executor import Row
from jobgate.storage.postgres.batches import PostgresBatchWrites
from jobgate.storage.postgres.bulk_actions import PostgresBulkWrites
from jobgate.storage.postgres.claims import claimed
from jobgate.storage.postgres.executor import Conn, PostgresExecutor, Q
from jobgate.storage.postgres.insert import insert
from jobgate.storage.postgres.partitions import PostgresPartitionWrites
from jobgate.storage.postgres.providers import PostgresProviderWrites
from jobgate.storage.postgres.rate_limits import PostgresRateLimitWrites
from jobgate.storage.postgres.writes import PostgresWrites
from jobgate.storage.records import ClaimRequest, Finished, Inserted
from jobgate.storage.rows import RowDecoder
from jobgate.storage.transaction_requests import FinishRequest, InsertRequest, Reaped, ReapRequest


class PostgresTransactions(
    PostgresBatchWrites,
    PostgresBulkWrites,
    PostgresPartitionWrites,
    PostgresProviderWrites,
    PostgresRateLimitWrites,
    PostgresWrites,
):
    """The job transactions here; each family's in its module (batches, bulk, partitions,
    providers, rate limits, and writes for the rest)."""

    def __init__(self, sql: PostgresExecutor) -> None:
        self._sql = sql
        self._decode = RowDecoder(time=sql.codec.time_out, json=sql.codec.json_out)

    async def insert(self, request: InsertRequest) -> Inserted:
        """postgres.insert: a binding may expire between two statements, hence its retries."""
        r = request
        return await insert(self._sql, self._decode, r.chunks, r.keys, r.queue_limit, r.now)

    async def claim(self, request: ClaimRequest) -> list[Job]:
        """Capped claims serialize on a transaction lock (SQLite's one writer computes the
        caps in Python)."""
        by_id = {
            job.id: job for job in await claimed(self._sql, self._decode, "job_claim", request)
        }
        return sorted(by_id.values(), key=lambda j: (j.priority, j.run_at, j.id))

    async def claim_by_id(self, request: ClaimRequest) -> list[Job]:
        return await claimed(self._sql, self._decode, "job_claim_by_id", request)

    async def finish_many(self, request: FinishRequest) -> list[Finished | None]:
        """One set-wise statement that also bills the successes (SQLite splits rounds and bills
        in Python)."""
        finishing = self._finishing(request.finishes, request.now)
        return _in_order(request.finishes, await self._sql.write("job_finish", **finishing))

    async def reap(self, request: ReapRequest) -> Reaped:
        """Reads expired leases and finishes them in one transaction, at the database's clock."""
        now, reaped = request.now, Reaped([], [], [])

        async def reap(conn: Conn) -> list[Finished | None]:
            moment = now or await conn.fetchval(Q["database_now"].sql)
            rows = await self._sql.fetch(conn, "job_leases_expired", limit=request.limit, now=now)
            judged = [
                reap_verdict_or_poison(
                    self._decode.job(row), now=moment, retry_delay=request.retry_delay
                )
                for row in rows
            ]
            reaped.verdicts[:] = [finish for finish, _ in judged]
            reaped.poisonings[:] = [poison for _, poison in judged if poison is not None]
            if not reaped.verdicts:
                return []
            finishing = self._finishing(reaped.verdicts, now, expired_only=True)
            rows = await self._sql.fetch(conn, "job_finish", **finishing)
            return _in_order(reaped.verdicts, rows)

        reaped.finished[:] = await self._sql.run(reap, transaction=True)
        return reaped

    def _finishing(
        self, finishes: Sequence[Finish], now: datetime | None, *, expired_only: bool = False
    ) -> dict[str, Any]:
        """job_finish's parameters."""
        payload = [finish_payload(finish, self._sql.codec) for finish in finishes]
        return {"finishes": payload, "now": now, "expired_only": expired_only}


def _in_order(finishes: Sequence[Finish], rows: Sequence[Row]) -> list[Finished | None]:
    """The narrow rows of a finish in the order of its verdicts, None where fenced off."""
    by_id = {row["id"]: Finished(row["id"], JobState(row["state"]), row["attempt"]) for row in rows}
    return [by_id.get(finish.lease.job_id) for finish in finishes]
