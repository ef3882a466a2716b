"""The embedded backend: one SQLite file in WAL mode, `synchronous=FULL`, one writer.

SQLite is one writer by design; the writer thread in `database` groups concurrent writes into
one commit. Several jobgate processes may share the file (busy_timeout waits for the lock),
but wake-ups then cross processes only by polling: scale out on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import orjson

from jobgate import errors, ids
from jobgate.clock import Clock, SystemClock, from_unix
from jobgate.domain import events as domain_events
from jobgate.domain.fairness import Candidate, TenantQueue, fair_order
from jobgate.domain.job import Job, JobEvent, Lease, NewJob
from jobgate.domain.states import JobState
from jobgate.storage import migrations, shared, sql
from jobgate.storage.base import SqlStorageBase
from jobgate.storage.changes import ChangeHub
from jobgate.storage.records import (
    ApiKey,
    ClaimPolicy,
    Finish,
    Finished,
    HeartbeatResult,
    IdempotencyClaim,
    OutboxEntry,
    QueueLimit,
    ReapResult,
    RetryDelay,
    SubmitOutcome,
    Tenant,
    UsageEntry,
)
from jobgate.storage.rows import RowDecoder, unix_time
from jobgate.storage.sqlite.batch import SqliteBatch, insert_params
from jobgate.storage.sqlite.batches import SqliteBatches
from jobgate.storage.sqlite.bulk import SqliteBulk
from jobgate.storage.sqlite.bulk_insert import SqliteBulkInsert
from jobgate.storage.sqlite.console import SqliteConsole
from jobgate.storage.sqlite.database import SqliteDatabase
from jobgate.storage.sqlite.executor import SqliteExecutor
from jobgate.storage.sqlite.providers import SqliteProviderStore
from jobgate.storage.sqlite.rate_limits import SqliteRateLimits
from jobgate.storage.sqlite.retention import SqliteRetention
from jobgate.storage.sqlite.roles import SqliteRoles
from jobgate.storage.sqlite.sessions import SqliteSessions
from jobgate.storage.sqlite.signals import SqliteSignals
from jobgate.storage.sqlite.transport import SqliteTransport
from jobgate.storage.sqlite.webhooks import SqliteWebhookStore
from jobgate.storage.store.admin import AdminQueries
from jobgate.storage.store.limits import LimitQueries
from jobgate.storage.store.schedules import ScheduleQueries
from jobgate.storage.store.streams import StreamQueries

Q = sql.load("jobgate.storage.sqlite")
_EPOCH = from_unix(0)
FOREIGN_COMMIT_CHECK_S = 1.0


def _json_in(value: Any) -> str | None:
    return None if value is None else orjson.dumps(value).decode()


def _ts(moment: datetime) -> float:
    return moment.timestamp()


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
    SqlStorageBase,
    LimitQueries,
    SqliteRateLimits,
    ScheduleQueries,
    SqliteWebhookStore,
    AdminQueries,
    SqliteProviderStore,
    SqliteBatch,
    SqliteRoles,
    SqliteSessions,
    SqliteBulk,
    SqliteRetention,
    SqliteSignals,
    StreamQueries,
    SqliteBulkInsert,
    SqliteBatches,
    SqliteConsole,
    SqliteTransport,
):
    dialect = "sqlite"
    _sql: SqliteExecutor

    def __init__(self, path: str, *, clock: Clock | None = None) -> None:
        self.path = path
        self.changes = ChangeHub()
        self._clock = clock or SystemClock()
        self._db = SqliteDatabase(path, configure=register_functions)
        self._sql = SqliteExecutor(self._db, self._clock)
        self._decode = RowDecoder(time=self._sql.codec.time_out, json=self._sql.codec.json_out)
        self._watcher: asyncio.Task[None] | None = None

    @classmethod
    def from_url(cls, url: str, *, clock: Clock | None = None) -> SqliteStorage:
        return cls(path_from_url(url), clock=clock)

    def _now(self, now: datetime | None) -> float:
        # On SQLite the database's clock is this host's clock.
        return _ts(now or self._clock.now())

    # -- lifecycle ---------------------------------------------------------------------

    async def open(self) -> None:
        self._db.open()

    async def close(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
            self._watcher = None
        await self._db.close()

    async def migrate(self) -> list[int]:
        pending = migrations.available("jobgate.storage.sqlite")
        now = self._now(None)

        def apply(conn: sqlite3.Connection) -> list[int]:
            conn.execute(Q["migrations_table"].sql)
            done = {row[0] for row in conn.execute(Q["migrations_applied"].sql)}
            applied = []
            for migration in pending:
                if migration.version in done:
                    continue
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
        def read(conn: sqlite3.Connection) -> int:
            conn.execute(Q["migrations_table"].sql)
            versions = [row[0] for row in conn.execute(Q["migrations_applied"].sql)]
            return max(versions, default=0)

        return await self._db.read(read)

    async def ping(self) -> None:
        await self._db.read(lambda conn: conn.execute("SELECT 1").fetchone())

    async def listen(self) -> None:
        """Notice commits made by other processes sharing the file (there is no NOTIFY on
        SQLite): once a second, and only then wake every waiter to re-read."""
        if self._watcher is None:
            self._watcher = asyncio.create_task(
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

    # -- tenants and keys --------------------------------------------------------------

    async def tenant_create(
        self, *, tenant_id: str, name: str, webhook_secret: str, now: datetime | None = None
    ) -> Tenant:
        params = {
            "id": tenant_id,
            "name": name,
            "webhook_secret": webhook_secret,
            "now": self._now(now),
        }

        def insert(conn: sqlite3.Connection) -> Tenant:
            if conn.execute(Q["tenant_by_name"].sql, {"name": name}).fetchone():
                raise errors.Conflict(f"tenant {name!r} already exists", code="tenant_exists")
            return self._decode.tenant(conn.execute(Q["tenant_insert"].sql, params).fetchone())

        return await self._db.write(insert)

    async def tenant_get(
        self, *, tenant_id: str | None = None, name: str | None = None
    ) -> Tenant | None:
        query, params = (
            (Q["tenant_by_id"], {"id": tenant_id})
            if tenant_id is not None
            else (Q["tenant_by_name"], {"name": name})
        )
        row = await self._db.read(lambda conn: conn.execute(query.sql, params).fetchone())
        return None if row is None else self._decode.tenant(row)

    async def tenant_list(self) -> list[Tenant]:
        rows = await self._db.read(lambda conn: conn.execute(Q["tenant_list"].sql).fetchall())
        return [self._decode.tenant(row) for row in rows]

    async def api_key_create(
        self,
        *,
        key_id: str,
        tenant_id: str,
        key_hash: str,
        key_prefix: str,
        now: datetime | None = None,
    ) -> ApiKey:
        params = {
            "id": key_id,
            "tenant_id": tenant_id,
            "key_hash": key_hash,
            "key_prefix": key_prefix,
            "now": self._now(now),
        }
        row = await self._db.write(
            lambda conn: conn.execute(Q["api_key_insert"].sql, params).fetchone()
        )
        return self._decode.api_key(row)

    async def api_key_tenant(self, *, key_hash: str) -> Tenant | None:
        row = await self._db.read(
            lambda conn: conn.execute(Q["api_key_tenant"].sql, {"key_hash": key_hash}).fetchone()
        )
        return None if row is None else self._decode.tenant(row)

    async def api_key_list(self, *, tenant_id: str) -> list[ApiKey]:
        rows = await self._db.read(
            lambda conn: conn.execute(Q["api_key_list"].sql, {"tenant_id": tenant_id}).fetchall()
        )
        return [self._decode.api_key(row) for row in rows]

    async def api_key_revoke(self, *, key_id: str, now: datetime | None = None) -> bool:
        params = {"id": key_id, "now": self._now(now)}
        row = await self._db.write(
            lambda conn: conn.execute(Q["api_key_revoke"].sql, params).fetchone()
        )
        return row is not None

    # -- jobs: submit and read ---------------------------------------------------------

    async def job_insert(
        self,
        *,
        job: NewJob,
        idempotency: IdempotencyClaim | None = None,
        queue_limit: QueueLimit | None = None,
        now: datetime | None = None,
    ) -> SubmitOutcome:
        at = self._now(now)
        params = insert_params(job, at)

        def insert(conn: sqlite3.Connection) -> SubmitOutcome:
            key = {
                "tenant_id": job.tenant_id,
                "route": idempotency.route if idempotency else None,
                "key": idempotency.key if idempotency else None,
                "now": at,
            }
            if idempotency is not None:
                seen = conn.execute(Q["idempotency_find"].sql, key).fetchone()
                if seen is not None:
                    if seen["body_hash"] != idempotency.body_hash:
                        raise errors.IdempotencyKeyReused()
                    row = conn.execute(Q["job_get"].sql, {"id": seen["job_id"]}).fetchone()
                    return SubmitOutcome(self._decode.job(row), True, seen["status_code"])
            if queue_limit is not None:
                _check_queue(conn, job.tenant_id, queue_limit)
            if idempotency is not None:
                conn.execute(
                    Q["idempotency_bind"].sql,
                    {
                        **key,
                        "body_hash": idempotency.body_hash,
                        "job_id": job.id,
                        "status_code": idempotency.status_code,
                        "expires_at": at + idempotency.ttl_s,
                    },
                )
            row = conn.execute(Q["job_insert"].sql, params).fetchone()
            return SubmitOutcome(self._decode.job(row), False, 202)

        outcome = await self._db.write(insert)
        if not outcome.replayed:
            self.changes.work_available()
        return outcome

    async def job_get(self, *, job_id: str, tenant_id: str | None = None) -> Job | None:
        if tenant_id is None:
            query, params = Q["job_get"].sql, {"id": job_id}
        else:
            query, params = Q["job_get_for_tenant"].sql, {"id": job_id, "tenant_id": tenant_id}
        row = await self._db.read(lambda conn: conn.execute(query, params).fetchone())
        return None if row is None else self._decode.job(row)

    async def job_list(
        self,
        *,
        tenant_id: str,
        states: Sequence[JobState] | None = None,
        dead_lettered: bool | None = None,
        after: str | None = None,
        limit: int = 20,
    ) -> list[Job]:
        def read(conn: sqlite3.Connection) -> list[Job]:
            after_created_at = after_id = None
            if after is not None:
                anchor = conn.execute(
                    Q["job_get_for_tenant"].sql, {"id": after, "tenant_id": tenant_id}
                ).fetchone()
                if anchor is None:
                    raise errors.InvalidRequest(
                        f"no job with id {after!r} to page after", param="after"
                    )
                after_created_at, after_id = anchor["created_at"], anchor["id"]
            rows = conn.execute(
                Q["job_list"].sql,
                {
                    "tenant_id": tenant_id,
                    "states": None if states is None else _json_in([str(s) for s in states]),
                    "dead_lettered": dead_lettered,
                    "after_created_at": after_created_at,
                    "after_id": after_id,
                    "limit": limit,
                },
            ).fetchall()
            return [self._decode.job(row) for row in rows]

        return await self._db.read(read)

    async def job_events(
        self, *, job_id: str, after_seq: int = 0, limit: int = 1000
    ) -> list[JobEvent]:
        params = {"job_id": job_id, "after_seq": after_seq, "limit": limit}
        rows = await self._db.read(
            lambda conn: conn.execute(Q["job_events"].sql, params).fetchall()
        )
        return [self._decode.event(row) for row in rows]

    # -- jobs: the lease holder's side -------------------------------------------------

    async def job_claim(
        self,
        *,
        worker_id: str,
        limit: int,
        lease_ttl_s: float,
        providers: Sequence[str] | None = None,
        policy: ClaimPolicy | None = None,
        now: datetime | None = None,
        models: Sequence[str] | None = None,
        skip_models: Sequence[str] | None = None,
    ) -> list[Job]:
        rules = policy or ClaimPolicy()
        at = self._now(now)
        provider_filter = None if providers is None else _json_in(list(providers))
        model_filter = None if models is None else _json_in(list(models))
        model_skips = None if skip_models is None else _json_in(list(skip_models))

        def claim(conn: sqlite3.Connection) -> list[Job]:
            # One writer: reading the running counts and claiming are one atomic step, so
            # caps hold exactly.
            running = dict(conn.execute(Q["job_claim_running"].sql).fetchall())
            by_key: dict[tuple[str, str], int] = {}
            if rules.keys_capped:
                for row in conn.execute(Q["job_claim_running_keys"].sql).fetchall():
                    by_key[(row["tenant_id"], row["concurrency_key"])] = row["running"]
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
                rows = conn.execute(
                    Q["job_claim_candidates"].sql,
                    {
                        "tenant_id": tenant,
                        "now": at,
                        "providers": provider_filter,
                        "models": model_filter,
                        "skip_models": model_skips,
                        "full_keys": _json_in(full) if key_cap > 0 else None,
                        "limit": min(free, limit),
                    },
                ).fetchall()
                if key_cap > 0:
                    rows = _within_key_caps(rows, tenant, key_cap, by_key)
                if rows:
                    candidates = tuple(
                        Candidate(r["id"], r["priority"], unix_time(r["run_at"]) or _EPOCH)
                        for r in rows
                    )
                    queues.append(TenantQueue(tenant, held, share.weight, free, candidates))
            chosen = fair_order(queues, limit)
            if not chosen:
                return []
            rows = conn.execute(
                Q["job_claim"].sql,
                {
                    "ids": _json_in(chosen),
                    "worker_id": worker_id,
                    "lease_ttl_s": lease_ttl_s,
                    "now": at,
                },
            ).fetchall()
            claimed = {row["id"]: self._decode.job(row) for row in rows}
            per_tenant: dict[str, int] = {}
            for job in claimed.values():
                per_tenant[job.tenant_id] = per_tenant.get(job.tenant_id, 0) + 1
            for tenant_id, count in per_tenant.items():
                conn.execute(Q["tenant_stats_bump"].sql, {"tenant_id": tenant_id, "count": count})
            return [claimed[job_id] for job_id in chosen if job_id in claimed]

        claimed = await self._db.write(claim)
        if claimed:
            self.changes.jobs_changed(job.id for job in claimed)
        return claimed

    async def job_heartbeat(
        self, *, leases: Sequence[Lease], lease_ttl_s: float, now: datetime | None = None
    ) -> list[HeartbeatResult]:
        at = self._now(now)

        def renew(conn: sqlite3.Connection) -> list[HeartbeatResult]:
            held = []
            for lease in leases:
                row = conn.execute(
                    Q["job_heartbeat"].sql,
                    {
                        "id": lease.job_id,
                        "token": lease.token,
                        "now": at,
                        "lease_ttl_s": lease_ttl_s,
                    },
                ).fetchone()
                if row is not None:
                    held.append(HeartbeatResult(row["id"], row["cancel_requested_at"] is not None))
            return held

        return await self._db.write(renew) if leases else []

    def _finish(
        self,
        conn: sqlite3.Connection,
        finishes: Sequence[Finish],
        at: float,
        *,
        expired_only: bool = False,
    ) -> list[Finished | None]:
        """Apply fenced verdicts set-wise: one UPDATE for the batch (one per round when a job
        appears more than once, in order, so each verdict meets the lease its predecessors
        left), then one ledger INSERT for its billed successes."""
        results: list[Finished | None] = [None] * len(finishes)
        for batch in _rounds(finishes):
            rows = conn.execute(
                Q["job_finish"].sql,
                {
                    "verdicts": _json_in([_verdict(finishes[i]) for i in batch]),
                    "expired_only": int(expired_only),
                    "now": at,
                },
            ).fetchall()
            written = {row["id"]: row for row in rows}
            billed = []
            for i in batch:
                finish = finishes[i]
                row = written.get(finish.lease.job_id)
                if row is None:
                    continue  # fenced off: nothing was written for this job
                done = Finished(row["id"], JobState(row["state"]), row["attempt"])
                results[i] = done
                if done.state is JobState.SUCCEEDED and finish.usage:
                    billed.append(
                        {
                            "job_id": done.job_id,
                            "tenant_id": row["tenant_id"],
                            "provider": row["provider"],
                            "model": row["model"],
                            "input_tokens": int(finish.usage.get("input_tokens") or 0),
                            "output_tokens": int(finish.usage.get("output_tokens") or 0),
                            **shared.cache_tokens(finish.usage),
                        }
                    )
            if billed:
                conn.execute(Q["usage_record_many"].sql, {"entries": _json_in(billed), "now": at})
        return results

    async def job_finish_many(
        self, *, finishes: Sequence[Finish], now: datetime | None = None
    ) -> list[Finished | None]:
        if not finishes:
            return []
        at = self._now(now)
        results = await self._db.write(lambda conn: self._finish(conn, finishes, at))
        self._published(results)
        return results

    async def _job_finish_read(self, *, finish: Finish, now: datetime | None) -> Job | None:
        at = self._now(now)

        def finish_read(conn: sqlite3.Connection) -> Job | None:
            if self._finish(conn, [finish], at) == [None]:
                return None
            row = conn.execute(Q["job_get"].sql, {"id": finish.lease.job_id}).fetchone()
            return None if row is None else self._decode.job(row)

        job = await self._db.write(finish_read)
        if job is not None:
            self._published([Finished(job.id, job.state, job.attempt)])
        return job

    # -- jobs: everyone else's side ----------------------------------------------------

    async def job_cancel(
        self, *, job_id: str, tenant_id: str, actor: str, now: datetime | None = None
    ) -> Job | None:
        params = {"id": job_id, "tenant_id": tenant_id, "actor": actor, "now": self._now(now)}

        def cancel(conn: sqlite3.Connection) -> tuple[Job | None, bool]:
            row = conn.execute(Q["job_cancel"].sql, params).fetchone()
            if row is not None:
                return self._decode.job(row), True
            row = conn.execute(Q["job_get_for_tenant"].sql, params).fetchone()
            return (None if row is None else self._decode.job(row)), False

        job, changed = await self._db.write(cancel)
        if job is not None and changed:
            self.changes.jobs_changed([job.id])
            if job.state is JobState.RUNNING:
                self.changes.cancel_requested([job.id])
            else:
                self.changes.outbox_available()
        return job

    async def job_record_ignored(
        self,
        *,
        job_id: str,
        to_state: JobState,
        actor: str,
        reason: str,
        now: datetime | None = None,
    ) -> None:
        at = self._now(now)

        def record(conn: sqlite3.Connection) -> None:
            row = conn.execute(Q["job_bump_seq"].sql, {"id": job_id}).fetchone()
            if row is None:
                return
            conn.execute(
                Q["job_event_insert"].sql,
                {
                    "job_id": job_id,
                    "seq": row["event_seq"],
                    "from_state": row["state"],
                    "to_state": str(to_state),
                    "actor": actor,
                    "reason": reason,
                    "applied": 0,
                    "now": at,
                },
            )

        await self._db.write(record)

    async def job_reap_expired(
        self, *, limit: int, retry_delay: RetryDelay, now: datetime | None = None
    ) -> ReapResult:
        moment = now or self._clock.now()
        at = _ts(moment)

        verdicts: list[Finish] = []

        def reap(conn: sqlite3.Connection) -> list[Finished | None]:
            rows = conn.execute(Q["job_leases_expired"].sql, {"now": at, "limit": limit})
            verdicts[:] = [
                shared.reap_verdict_or_poison(
                    self._decode.job(row), now=moment, retry_delay=retry_delay
                )
                for row in rows.fetchall()
            ]
            return self._finish(conn, verdicts, at, expired_only=True)

        finished = await self._db.write(reap)
        self._published(finished)
        return shared.reap_result(finished, verdicts)

    async def job_expire_due(self, *, limit: int, now: datetime | None = None) -> list[str]:
        params = {"limit": limit, "now": self._now(now)}
        rows = await self._db.write(
            lambda conn: conn.execute(Q["job_expire_due"].sql, params).fetchall()
        )
        expired = [row["id"] for row in rows]
        if expired:
            self.changes.jobs_changed(expired)
            self.changes.outbox_available()
        return expired

    async def job_redrive(
        self, *, job_id: str, tenant_id: str, actor: str, now: datetime | None = None
    ) -> Job | None:
        params = {"id": job_id, "tenant_id": tenant_id, "actor": actor, "now": self._now(now)}

        def redrive(conn: sqlite3.Connection) -> Job | None:
            row = conn.execute(Q["job_redrive"].sql, params).fetchone()
            if row is not None:
                return self._decode.job(row)
            existing = conn.execute(Q["job_get_for_tenant"].sql, params).fetchone()
            if existing is None:
                return None
            raise shared.redrive_refused(self._decode.job(existing))

        job = await self._db.write(redrive)
        if job is not None:
            self.changes.jobs_changed([job.id])
            self.changes.work_available()
        return job

    async def job_purge(
        self, *, job_id: str, tenant_id: str, now: datetime | None = None
    ) -> Job | None:
        params = {"id": job_id, "tenant_id": tenant_id, "now": self._now(now)}
        row = await self._db.write(lambda conn: conn.execute(Q["job_purge"].sql, params).fetchone())
        return None if row is None else self._decode.job(row)

    async def usage_for_job(self, *, job_id: str) -> list[UsageEntry]:
        rows = await self._db.read(
            lambda conn: conn.execute(Q["usage_for_job"].sql, {"job_id": job_id}).fetchall()
        )
        return [self._decode.usage(row) for row in rows]

    async def outbox_for_job(self, *, job_id: str) -> list[OutboxEntry]:
        rows = await self._db.read(
            lambda conn: conn.execute(Q["outbox_for_job"].sql, {"job_id": job_id}).fetchall()
        )
        return [self._decode.outbox(row) for row in rows]


def _verdict(finish: Finish) -> dict[str, Any]:
    """One element of job_finish's JSON array; JSON members travel as JSON text."""
    return {
        "id": finish.lease.job_id,
        "token": finish.lease.token,
        "state": str(finish.state),
        "result": _json_in(finish.result),
        "error": _json_in(finish.error),
        "usage": _json_in(finish.usage),
        "refund_attempt": 0 if finish.count_attempt else 1,
        "lost": int(finish.lost),
        "dead_lettered": int(finish.dead_lettered),
        "retry_in_s": finish.retry_in_s,
        "cancel_outcome": finish.cancel_outcome,
        "creation_outcome": finish.creation_outcome,
        "provider_request_id": finish.provider_request_id,
        "actor": finish.actor,
        "reason": finish.reason,
    }


def _rounds(finishes: Sequence[Finish]) -> list[list[int]]:
    """Indices of `finishes` split so that no job appears twice in one round: round k holds
    each job's k-th verdict (the worker sends one per lease, so almost always one round)."""
    rounds: list[list[int]] = []
    seen: dict[str, int] = {}
    for index, finish in enumerate(finishes):
        k = seen.get(finish.lease.job_id, 0)
        seen[finish.lease.job_id] = k + 1
        if k == len(rounds):
            rounds.append([])
        rounds[k].append(index)
    return rounds


def _check_queue(conn: sqlite3.Connection, tenant_id: str, limit: QueueLimit) -> None:
    if limit.tenant_max is not None:
        row = conn.execute(Q["queued_count"].sql, {"tenant_id": tenant_id}).fetchone()
        if row["queued"] >= limit.tenant_max:
            raise errors.QueueFull("max_queued", 0)
    if limit.total_max is not None:
        if conn.execute(Q["queued_total"].sql).fetchone()["queued"] >= limit.total_max:
            raise errors.QueueFull("max_queued_total", 0)


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


def _within_key_caps(
    rows: list[sqlite3.Row], tenant: str, key_cap: int, by_key: dict[tuple[str, str], int]
) -> list[sqlite3.Row]:
    """The candidates (best first) a claim may take without a concurrency key passing its
    cap: a key's running jobs plus those taken before it in this list."""
    taken: dict[str, int] = {}
    kept = []
    for row in rows:
        key = row["concurrency_key"]
        if key is not None:
            if by_key.get((tenant, key), 0) + taken.get(key, 0) >= key_cap:
                continue
            taken[key] = taken.get(key, 0) + 1
        kept.append(row)
    return kept
