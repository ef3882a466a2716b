"""The embedded backend: one SQLite file in WAL mode, `synchronous=FULL`, one writer.

SQLite is one writer by design; the writer thread in `database` groups concurrent writes into
one commit. Several jobgate processes may share the file (busy_timeout waits for the lock),
but wake-ups then cross processes only by polling: scale out on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

from jobgate import errors, ids
from jobgate.clock import Clock, SystemClock
from jobgate.domain import events as domain_events
from jobgate.domain.fairness import TenantQueue, fair_order
from jobgate.domain.job import Job, NewJob
from jobgate.domain.states import JobState
from jobgate.domain.verdicts import (
    Finish,
    Poisoning,
    RetryDelay,
    reap_verdict_or_poison,
)
from jobgate.storage import migrations, records, shared
from jobgate.storage.base import Now
from jobgate.storage.sqlite.batches import SqliteBatches
from jobgate.storage.sqlite.bulk import SqliteBulk
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
from jobgate.storage.sqlite.providers import SqliteProviderStore
from jobgate.storage.sqlite.rate_limits import SqliteRateLimits
from jobgate.storage.sqlite.retention import SqliteRetention
from jobgate.storage.sqlite.transport import SqliteTransport
from jobgate.storage.sqlite.webhooks import SqliteWebhookStore
from jobgate.storage.store.sql_store import SqlStore

FOREIGN_COMMIT_CHECK_S = 1.0


def _event_type(api: str, state: str, result_status: Any = None) -> str | None:
    status = result_status if isinstance(result_status, str) else None
    return domain_events.event_type_for(api, JobState(state), status)


def register_functions(conn: sqlite3.Connection) -> None:
    """The functions the triggers call; every connection that writes jobs needs them. Since
    migration 0008 the job trigger computes the event type in SQL: jobgate_event_type stays
    for a database still at an older version (the trigger of 0005 calls it)."""
    conn.create_function("jobgate_event_type", 2, _event_type, deterministic=True)
    conn.create_function("jobgate_event_type", 3, _event_type, deterministic=True)
    conn.create_function("jobgate_event_id", 3, ids.event_id, deterministic=True)


def path_from_url(url: str) -> str:
    """`sqlite:///relative.db`, `sqlite:////absolute.db` or `sqlite://:memory:`-free paths."""
    if not url.startswith("sqlite://"):
        raise errors.ConfigError("JOBGATE_DATABASE_URL", f"not a sqlite URL: {url!r}")
    path = url[len("sqlite://") :]
    if path.startswith("/"):
        path = path[1:]
    if not path:
        raise errors.ConfigError("JOBGATE_DATABASE_URL", "sqlite URL names no file")
    return path


class SqliteStorage(
    SqlStore,
    SqliteRateLimits,
    SqliteWebhookStore,
    SqliteProviderStore,
    SqliteBatches,
    SqliteBulk,
    SqliteRetention,
    SqliteTransport,
):
    dialect = "sqlite"
    _sql: SqliteExecutor

    def __init__(self, path: str, *, clock: Clock | None = None) -> None:
        self.path = path
        self._clock = clock or SystemClock()
        self._db = SqliteDatabase(path, configure=register_functions)
        super().__init__(SqliteExecutor(self._db, self._clock))

    @classmethod
    def from_url(cls, url: str, *, clock: Clock | None = None) -> SqliteStorage:
        return cls(path_from_url(url), clock=clock)

    # -- lifecycle ---------------------------------------------------------------------

    async def open(self) -> None:
        self._db.open()

    async def close(self) -> None:
        await self._stop_wakeups()
        await self._db.close()

    async def migrate(self) -> list[int]:
        """Statement by statement (a CREATE TRIGGER holds semicolons) on the writer thread."""
        now = self._sql.codec.now(None)

        def apply(conn: sqlite3.Connection) -> list[int]:
            applied = []
            for migration in migrations.pending("jobgate.storage.sqlite", _applied_versions(conn)):
                for statement in _statements(migration.sql):
                    conn.execute(statement)
                conn.execute(
                    Q["migration_record"].sql,
                    {"version": migration.version, "name": migration.name, "now": now},
                )
                applied.append(migration.version)
            return applied

        return await self._db.write(apply)

    async def schema_version(self) -> int:
        return await self._db.read(lambda conn: max(_applied_versions(conn), default=0))

    async def listen(self) -> None:
        """Notice commits made by other processes sharing the file (there is no NOTIFY on
        SQLite): once a second, and only then wake every waiter to re-read."""
        if self._wakeups is None:
            self._wakeups = asyncio.create_task(
                self._watch_foreign_commits(), name="jobgate-sqlite-watch"
            )

    async def _watch_foreign_commits(self) -> None:
        seen: int | None = None
        while True:
            try:
                version = await self._db.foreign_commits()
            except errors.StorageError:
                version = None
            if version is not None and seen is not None and version != seen:
                self.changes.everything_changed()
            seen = version if version is not None else seen
            await asyncio.sleep(FOREIGN_COMMIT_CHECK_S)

    async def database_now(self) -> datetime:
        return self._clock.now()

    # -- jobs: what differs from PostgreSQL --------------------------------------------

    async def _insert(
        self,
        chunks: Iterable[Sequence[NewJob]],
        keys: Sequence[records.IdempotencyClaim | None] | None,
        queue: records.QueueLimit | None,
        now: Now,
    ) -> records.Inserted:
        """Every chunk made first, then the replay checks, the bindings, the inserts and the
        queue bounds as one operation of the one writer: no lock or retry is needed
        (PostgreSQL takes locks and retries)."""
        jobs = [job for chunk in chunks for job in chunk]
        if keys is not None and len(keys) != len(jobs):
            raise ValueError("job_insert: one key (or None) per job")
        if not jobs:
            return records.Inserted([])
        if keys is not None and all(claim is None for claim in keys):
            keys = None
        at = self._sql.codec.now(now)
        return await self._db.write(
            lambda conn: insert_items(conn, jobs, keys, queue, at, self._decode)
        )

    # -- jobs: the lease holder's side -------------------------------------------------

    async def _claim(self, claim: records.ClaimRequest) -> list[Job]:
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

    def _finish(
        self,
        conn: sqlite3.Connection,
        finishes: Sequence[Finish],
        at: float,
        *,
        expired_only: bool = False,
    ) -> list[records.Finished | None]:
        """Apply fenced verdicts set-wise: the verdicts are bound into a temp table, then one
        INSERT bills the successes with usage and one UPDATE applies them all, under the same
        fence (one round of the two per repeat when a job appears more than once, in order,
        so each verdict meets the lease its predecessors left)."""
        json = self._sql.codec.json
        results: list[records.Finished | None] = [None] * len(finishes)
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
                    results[i] = records.Finished(job_id, _STATES[row[0]], row[1])
        return results

    async def _finish_many(
        self, finishes: Sequence[Finish], now: Now
    ) -> list[records.Finished | None]:
        """Verdicts applied in rounds and billed in Python within one writer operation."""
        at = self._sql.codec.now(now)
        return await self._db.write(lambda conn: self._finish(conn, finishes, at))

    async def _record_ignored(self, event: dict[str, Any]) -> None:
        """Two statements (bump the sequence, write the event): SQLite cannot put an UPDATE
        inside an INSERT as PostgreSQL's one statement does."""

        def record(conn: sqlite3.Connection) -> None:
            row = conn.execute(Q["job_bump_seq"].sql, {"id": event["id"]}).fetchone()
            if row is not None:
                conn.execute(
                    Q["job_event_insert"].sql,
                    {
                        **event,
                        "job_id": event["id"],
                        "seq": row["event_seq"],
                        "from_state": row["state"],
                        "applied": 0,
                    },
                )

        await self._db.write(record)

    async def _reap(
        self, limit: int, retry_delay: RetryDelay, now: Now
    ) -> tuple[list[records.Finished | None], list[Finish], list[Poisoning]]:
        """Expired leases are read and finished in one writer operation, at this host's clock."""
        moment = now or self._clock.now()
        at = self._sql.codec.now(moment)

        verdicts: list[Finish] = []
        poisonings: list[Poisoning] = []

        def reap(conn: sqlite3.Connection) -> list[records.Finished | None]:
            rows = conn.execute(Q["job_leases_expired"].sql, {"now": at, "limit": limit})
            judged = [
                reap_verdict_or_poison(self._decode.job(row), now=moment, retry_delay=retry_delay)
                for row in mapped_rows(rows)
            ]
            verdicts[:] = [finish for finish, _ in judged]
            poisonings[:] = [poisoning for _, poisoning in judged if poisoning is not None]
            return self._finish(conn, verdicts, at, expired_only=True)

        return await self._db.write(reap), verdicts, poisonings


def _applied_versions(conn: sqlite3.Connection) -> set[int]:
    conn.execute(Q["migrations_table"].sql)
    return {row[0] for row in conn.execute(Q["migrations_applied"].sql)}


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


def _statements(script: str) -> list[str]:
    """Split a migration into statements; CREATE TRIGGER bodies hold semicolons of their own."""
    statements: list[str] = []
    current: list[str] = []
    for line in script.splitlines():
        current.append(line)
        candidate = "\n".join(current).strip()
        if candidate.endswith(";") and sqlite3.complete_statement(candidate):
            statements.append(candidate)
            current = []
    tail = "\n".join(current).strip()
    if tail and not all(line.strip().startswith("--") or not line.strip() for line in current):
        statements.append(tail)
    return statements
