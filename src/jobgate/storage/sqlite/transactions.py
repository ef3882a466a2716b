"""The storage seam on SQLite (storage.transactions.Transactions): each transaction is one
operation of the single writer (sqlite.database), so the rules PostgreSQL expresses as locks
and statements are computed in Python where the counts read are the counts written under: the
fair order and the caps of a claim (domain.fairness), the rounds and the billing of a finish,
the idempotency decision and the queue bounds of an insert, with no lock or retry."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from jobgate.clock import Clock
from jobgate.domain.fairness import TenantQueue, fair_order
from jobgate.domain.job import Job
from jobgate.domain.states import JobState
from jobgate.domain.verdicts import Finish, reap_verdict_or_poison
from jobgate.storage import shared
from jobgate.storage.executor import Row
from jobgate.storage.records import ClaimRequest, Finished, Inserted
from jobgate.storage.rows import RowDecoder
from jobgate.storage.sqlite.batches import SqliteBatchWrites
from jobgate.storage.sqlite.bulk_actions import SqliteBulkWrites
from jobgate.storage.sqlite.claims import (
    NOTHING_LEASED,
    KeyLimits,
    Leased,
    RunningSlots,
    candidates,
    keeper,
    lease,
    mapped_rows,
)
from jobgate.storage.sqlite.database import SqliteDatabase
from jobgate.storage.sqlite.executor import Q, SqliteExecutor
from jobgate.storage.sqlite.insert import insert_items
from jobgate.storage.sqlite.providers import SqliteProviderWrites
from jobgate.storage.sqlite.rate_limits import SqliteRateLimitWrites
from jobgate.storage.sqlite.retention import SqliteRetentionWrites
from jobgate.storage.sqlite.webhooks import SqliteWebhookWrites
from jobgate.storage.transaction_requests import (
    FinishRequest,
    InsertRequest,
    Reaped,
    ReapRequest,
    RecordIgnoredWrite,
    ScheduleInsertWrite,
    record_params,
)


class SqliteTransactions(
    SqliteBatchWrites,
    SqliteBulkWrites,
    SqliteProviderWrites,
    SqliteRateLimitWrites,
    SqliteRetentionWrites,
    SqliteWebhookWrites,
):
    """The job transactions here; each family's in its module (batches, bulk, providers,
    rate limits, retention, webhooks)."""

    def __init__(self, db: SqliteDatabase, sql: SqliteExecutor, clock: Clock) -> None:
        self._db = db
        self._sql = sql
        self._clock = clock
        self._decode = RowDecoder(time=sql.codec.time_out, json=sql.codec.json_out)

    async def insert(self, request: InsertRequest) -> Inserted:
        """Every chunk made first, then the replay checks, the bindings, the inserts and the
        queue bounds as one operation of the one writer (sqlite.insert)."""
        jobs = [job for chunk in request.chunks for job in chunk]
        keys = request.keys
        if keys is not None and len(keys) != len(jobs):
            raise ValueError("job_insert: one key (or None) per job")
        if not jobs:
            return Inserted([])
        if keys is not None and all(claim is None for claim in keys):
            keys = None
        at, limit = self._sql.codec.now(request.now), request.queue_limit
        return await self._db.write(
            lambda conn: insert_items(conn, jobs, keys, limit, at, self._decode)
        )

    async def record_ignored_write(self, request: RecordIgnoredWrite) -> None:
        """Two statements (bump the sequence, write the event): SQLite cannot put an UPDATE
        inside an INSERT as PostgreSQL's one statement does."""
        r = request

        def record(conn: sqlite3.Connection) -> None:
            row = conn.execute(Q["job_bump_seq"].sql, {"id": r.id}).fetchone()
            if row is not None:
                conn.execute(
                    Q["job_event_insert"].sql,
                    {
                        "job_id": r.id,
                        "seq": row["event_seq"],
                        "from_state": row["state"],
                        "to_state": r.to_state,
                        "actor": r.actor,
                        "reason": r.reason,
                        "applied": 0,
                        "now": r.now,
                    },
                )

        await self._db.write(record)

    async def schedule_insert_write(self, request: ScheduleInsertWrite) -> Row | None:
        """One statement: the one writer makes its count exact."""
        return await self._sql.write_one("schedule_insert", **record_params(request))

    async def claim(self, claim: ClaimRequest) -> list[Job]:
        """Fair order is computed in Python (domain.fairness) inside the one writer's operation,
        so the caps read are the caps claimed under."""
        rules, limit = claim.rules, claim.limit
        at = self._sql.codec.now(claim.now)
        json = self._sql.codec.json
        provider_filter = json(claim.providers)
        model_filter = json(claim.models)
        model_skips = json(claim.skip_models)

        def take(conn: sqlite3.Connection) -> Leased:
            # One writer: reading the running counts and claiming are one atomic step, so
            # caps hold exactly.
            slots = RunningSlots.read(conn, rules)
            keys = KeyLimits(rules, at)
            running, by_key = slots.tenants, slots.keys
            times: dict[Any, datetime] = {}  # stored run_at -> its time, for this claim
            queues: list[TenantQueue] = []
            tenant = ""
            while True:
                row = conn.execute(Q["job_claim_next_tenant"].sql, {"after": tenant}).fetchone()
                if row is None or row["tenant_id"] is None:
                    break
                tenant = row["tenant_id"]
                if tenant in rules.blocked_tenants:
                    continue
                share = rules.share(tenant)
                held = running.get(tenant, 0)
                free = max(share.max_running - held, 0) if share.max_running > 0 else limit
                if free == 0:
                    continue
                key_cap = share.max_running_per_key
                full = [k for (t, k), n in by_key.items() if t == tenant and n >= key_cap]
                full = (full if key_cap > 0 else []) + keys.passed_over(conn, tenant)
                found = candidates(
                    conn,
                    {
                        "tenant_id": tenant,
                        "now": at,
                        "providers": provider_filter,
                        "models": model_filter,
                        "skip_models": model_skips,
                        "full_keys": json(full) if full else None,
                        "limit": min(free, limit),
                    },
                    # best first, while the key has a slot (and a start) left
                    keep=keeper(slots, keys, share, tenant),
                    times=times,
                )
                if found:
                    queues.append(TenantQueue(tenant, held, share.weight, free, found))
            chosen = fair_order(queues, limit)
            if not chosen:
                return NOTHING_LEASED
            leased = lease(
                conn, chosen, worker_id=claim.worker_id, lease_ttl_s=claim.lease_ttl_s, now=at
            )
            keys.take(conn, leased)
            return leased

        leased = await self._db.write(take)
        return self._decode.jobs_at(leased.rows, leased.columns)

    async def claim_by_id(self, claim: ClaimRequest) -> list[Job]:
        """The caps and the per-key limits applied in Python inside one write operation (the
        single writer makes the counts it reads exact), as claim applies them."""
        json, rules = self._sql.codec.json, claim.rules
        at = self._sql.codec.now(claim.now)
        params = {"ids": json(claim.ids), "now": at, "providers": json(claim.providers)}

        def run(conn: sqlite3.Connection) -> Leased:
            slots = RunningSlots.read(conn, rules)
            keys = KeyLimits(rules, at)
            passed: dict[str, set[str]] = {}  # per tenant, read once
            chosen = []
            for row in conn.execute(Q["job_claim_by_id_candidates"].sql, params).fetchall():
                tenant, key = row["tenant_id"], row["concurrency_key"]
                if tenant in rules.blocked_tenants:
                    continue
                if tenant not in passed:
                    passed[tenant] = set(keys.passed_over(conn, tenant))
                if key in passed[tenant] or not keys.admits(tenant, key):
                    continue
                if slots.take(rules.share(tenant), tenant, key):
                    chosen.append(row["id"])
            if not chosen:
                return NOTHING_LEASED
            leased = lease(
                conn,
                chosen,
                worker_id=claim.worker_id,
                lease_ttl_s=claim.lease_ttl_s,
                now=at,
            )
            keys.take(conn, leased)
            return leased

        leased = await self._db.write(run)
        return self._decode.jobs_at(leased.rows, leased.columns)

    def _finish(
        self,
        conn: sqlite3.Connection,
        finishes: Sequence[Finish],
        at: float,
        *,
        expired_only: bool = False,
    ) -> list[Finished | None]:
        """Apply fenced verdicts set-wise: the verdicts are bound into a temp table, then one
        INSERT bills the successes with usage and one UPDATE applies them all, under the same
        fence (one round of the two per repeat when a job appears more than once, in order,
        so each verdict meets the lease its predecessors left)."""
        json = self._sql.codec.json
        results: list[Finished | None] = [None] * len(finishes)
        params = {"expired_only": int(expired_only), "now": at}
        conn.execute(Q["finish_verdicts_table"].sql)
        for batch in _rounds(finishes):
            conn.executemany(
                Q["finish_verdicts_add"].sql, [verdict_row(finishes[i], json) for i in batch]
            )
            conn.execute(Q["finish_verdicts_bill"].sql, params)
            written = {
                job_id: (state, attempt)
                for job_id, state, attempt in conn.execute(Q["job_finish"].sql, params)
            }
            conn.execute(Q["finish_verdicts_clear"].sql)
            for i in batch:
                job_id = finishes[i].lease.job_id
                row = written.get(job_id)
                if row is not None:  # else fenced off: nothing was written for this job
                    results[i] = Finished(job_id, _STATES[row[0]], row[1])
        return results

    async def finish_many(self, request: FinishRequest) -> list[Finished | None]:
        """Verdicts applied in rounds and billed in Python within one writer operation."""
        at = self._sql.codec.now(request.now)
        return await self._db.write(lambda conn: self._finish(conn, request.finishes, at))

    async def reap(self, request: ReapRequest) -> Reaped:
        """Expired leases are read and finished in one writer operation, at this host's clock."""
        moment = request.now or self._clock.now()
        at = self._sql.codec.now(moment)
        reaped = Reaped([], [], [])

        def reap(conn: sqlite3.Connection) -> list[Finished | None]:
            rows = conn.execute(Q["job_leases_expired"].sql, {"now": at, "limit": request.limit})
            judged = [
                reap_verdict_or_poison(
                    self._decode.job(row), now=moment, retry_delay=request.retry_delay
                )
                for row in mapped_rows(rows)
            ]
            reaped.verdicts[:] = [finish for finish, _ in judged]
            reaped.poisonings[:] = [poison for _, poison in judged if poison is not None]
            return self._finish(conn, reaped.verdicts, at, expired_only=True)

        reaped.finished[:] = await self._db.write(reap)
        return reaped


# A state as stored -> the JobState (an enum call per finished job costs more than a lookup).
_STATES = {state.value: state for state in JobState}


def _rounds(finishes: Sequence[Finish]) -> list[list[int]]:
    """Indices of `finishes` split so that no job appears twice in one round: round k holds
    each job's k-th verdict (the worker sends one per lease, so almost always one round)."""
    if len({finish.lease.job_id for finish in finishes}) == len(finishes):
        return [list(range(len(finishes)))]  # the common case: one round, no counting
    rounds: list[list[int]] = []
    seen: dict[str, int] = {}
    for index, finish in enumerate(finishes):
        k = seen.get(finish.lease.job_id, 0)
        seen[finish.lease.job_id] = k + 1
        if k == len(rounds):
            rounds.append([])
        rounds[k].append(index)
    return rounds


def verdict_row(finish: Finish, json: Callable[[Any], str | None]) -> tuple[Any, ...]:
    """One verdict as a row of temp.finish_verdicts, in its column order (finish_verdicts_add
    binds by position): storage.base.finish_payload's fields, then the ledger row it bills."""
    usage = finish.usage
    billed = finish.state is JobState.SUCCEEDED and bool(usage)
    return (
        finish.lease.job_id,
        finish.lease.token,
        finish.state.value,
        json(finish.result),
        json(finish.error),
        json(usage),
        0 if finish.count_attempt else 1,
        int(finish.lost),
        int(finish.dead_lettered),
        finish.retry_in_s,
        finish.cancel_outcome,
        finish.creation_outcome,
        finish.provider_request_id,
        finish.actor,
        finish.reason,
        int(billed),
        *(_ledger_tokens(usage) if billed and usage is not None else (0, 0, 0, 0)),
    )


def _ledger_tokens(usage: dict[str, Any]) -> tuple[int, int, int, int]:
    """The usage ledger's token columns, as storage.shared.cache_tokens and the PostgreSQL
    finish read them."""
    cache = shared.cache_tokens(usage)
    return (
        int(usage.get("input_tokens") or 0),
        int(usage.get("output_tokens") or 0),
        cache["cache_read_tokens"],
        cache["cache_write_tokens"],
    )
