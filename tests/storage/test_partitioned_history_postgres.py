"""PostgreSQL's history tables partitioned by day (migration 0088): job_events,
job_output_chunks, outbox and webhook_attempts are partitioned by RANGE on job_created_at (the
creation time of the job, or batch, a row belongs to), one UTC day per partition plus DEFAULT.

- The conversion keeps every row of a database filled at the migration before (every kind of
  history row, of jobs of today, of a few days ago and of long ago, and of a batch), each in the
  partition of its owner's day (long ago: DEFAULT), and every key, trigger and the log view
  still hold.
- A fresh database has today's partitions and the next days'; an insert dated outside every
  partition lands in DEFAULT and is never lost, and moves into its day's partition when that
  day's partition is made.
- Reads by job name its one partition (the others are pruned), through its index.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from datetime import UTC, date, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from prometheus_client import REGISTRY

from jobgate.config import Settings
from jobgate.domain.job import Lease
from jobgate.domain.states import JobState
from jobgate.domain.verdicts import Finish
from jobgate.roles.retention import Retention
from jobgate.storage import migrations
from jobgate.storage.postgres.executor import Q
from jobgate.storage.postgres.partitions import history_days
from jobgate.storage.postgres.store import PostgresStore, postgres_store
from jobgate.storage.records import DeliveryOutcome, IdempotencyClaim, Tenant
from jobgate.testing import FakeClock
from tests.storage.helpers import finish_one, make_tenant, new_job, submit_one
from tests.storage.webhook_helpers import make_endpoint
from tests.support.databases import PostgresTemplate, dsn_for

pytestmark = [pytest.mark.asyncio, pytest.mark.postgres]

BEFORE = 88  # the conversion's version: the database is filled at the schema before it
HISTORY = ("job_events", "job_output_chunks", "outbox", "webhook_attempts")
DAY = timedelta(days=1)
DELIVERED = DeliveryOutcome(state="succeeded", attempted=True, status_code=200, latency_ms=3)


def _today() -> date:
    return datetime.now(UTC).date()


def _midnight(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


@pytest.fixture
async def old_dsn(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[str, Callable[[], None]]]:
    """A database migrated up to the version before the conversion, and a function that lets
    `migrate()` go on to the newest."""
    real = migrations.pending

    def before(package: str, applied: Any) -> list[migrations.Migration]:
        return [m for m in real(package, applied) if m.version < BEFORE]

    monkeypatch.setattr(migrations, "pending", before)
    name = f"jobgate_partitions_{abs(hash(request.node.name)) % 10**8}"
    await PostgresTemplate._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    await PostgresTemplate._admin(f'CREATE DATABASE "{name}"')
    try:
        yield dsn_for(name), lambda: monkeypatch.setattr(migrations, "pending", real)
    finally:
        await PostgresTemplate._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def _rows(conn: asyncpg.Connection, table: str, order: str) -> list[dict[str, Any]]:
    return [dict(r) for r in await conn.fetch(f"SELECT * FROM {table} ORDER BY {order}")]


async def _fill_old_schema(
    storage: PostgresStore, conn: asyncpg.Connection
) -> tuple[Tenant, dict[str, datetime]]:
    """Jobs of today, of three days ago and of fifty days ago (each claimed, streamed, finished
    with a webhook delivered once), and a batch with a webhook row: every kind of history row.
    Written through the store where its statements predate the conversion (jobs, claims,
    finishes: the triggers write events and outbox rows), by hand elsewhere."""
    tenant = await make_tenant(storage, "old")
    await conn.execute(
        "INSERT INTO webhook_endpoints (id, tenant_id, url, secret, created_at, updated_at)"
        " VALUES ('ep_old', $1, 'https://example.com/hook', 'whsec_x', now(), now())",
        tenant.id,
    )
    owners: dict[str, datetime] = {}
    now = datetime.now(UTC).replace(microsecond=0)
    for label, at in (("today", now), ("recent", now - 3 * DAY), ("ancient", now - 50 * DAY)):
        job = (await submit_one(storage, job=new_job(tenant, id=f"job_{label}"), now=at)).job
        owners[job.id] = job.created_at
        await conn.execute(
            "UPDATE jobs SET state = 'running', attempt = 1, run_count = 1, started_at = $2,"
            " updated_at = $2, lease_owner = 'w', lease_token = 't', lease_expires_at = $2,"
            " event_seq = event_seq + 1, transition_actor = 'worker', transition_reason = 'claimed'"
            " WHERE id = $1",
            job.id,
            at + timedelta(seconds=1),
        )
        for seq in (1, 2):
            await conn.execute(
                "INSERT INTO job_output_chunks (job_id, seq, generation, text, created_at,"
                " continued_chars) VALUES ($1, $2, 1, $3, $4, 0)",
                job.id,
                seq,
                f"chunk {seq} of {label}",
                at + timedelta(seconds=2),
            )
        await conn.execute(
            "UPDATE jobs SET state = 'succeeded', completed_at = $2, updated_at = $2,"
            " result = '{\"ok\": true}', lease_token = NULL, lease_owner = NULL,"
            " event_seq = event_seq + 1, transition_actor = 'worker', transition_reason = 'done'"
            " WHERE id = $1",
            job.id,
            at + timedelta(seconds=3),
        )
        await conn.execute(
            "INSERT INTO webhook_attempts (id, outbox_id, event_id, tenant_id, job_id, target,"
            " attempt, status_code, latency_ms, error, succeeded, created_at)"
            " SELECT 'att_' || o.id, o.id, o.event_id, o.tenant_id, o.job_id, o.target, 1, 200, 5,"
            " NULL, true, $2 FROM outbox AS o WHERE o.job_id = $1",
            job.id,
            at + timedelta(seconds=4),
        )
        await conn.execute(
            "UPDATE outbox SET state = 'succeeded', attempts = 1, completed_at = $2"
            " WHERE job_id = $1",
            job.id,
            at + timedelta(seconds=4),
        )
    batch_at = now - 2 * DAY
    await conn.execute(
        "INSERT INTO batches (id, tenant_id, status, endpoint, input_file_id, completion_window,"
        " priority, total, created_at, expires_at) VALUES ('batch_old', $1, 'completed',"
        " '/v1/chat/completions', 'file_x', '24h', 5, 0, $2, $3)",
        tenant.id,
        batch_at,
        batch_at + DAY,
    )
    owners["batch_old"] = batch_at
    await conn.execute(
        "INSERT INTO outbox (id, event_id, tenant_id, job_id, event_type, target, endpoint_id,"
        " series, job_status, created_at, next_attempt_at) VALUES ('msg_batch_old', 'evt_b',"
        " $1, 'batch_old', 'batch.completed', 'ep_old', 'ep_old', 0, 'completed', $2, $2)",
        tenant.id,
        batch_at,
    )
    return tenant, owners


async def _partition_of(conn: asyncpg.Connection, table: str) -> dict[tuple[Any, ...], str]:
    key = "id" if table in ("outbox", "webhook_attempts") else "job_id, seq"
    rows = await conn.fetch(f"SELECT {key}, tableoid::regclass::text AS part FROM {table}")
    return {tuple(r)[:-1]: r["part"] for r in rows}


def _expected_partition(table: str, owner_created: datetime) -> str:
    day = owner_created.astimezone(UTC).date()
    if _today() - timedelta(days=35) <= day <= _today() + timedelta(days=3):
        return f"{table}_p{day:%Y%m%d}"
    return f"{table}_default"


async def test_the_conversion_keeps_every_row_key_and_trigger(
    old_dsn: tuple[str, Callable[[], None]],
) -> None:
    dsn, to_newest = old_dsn
    storage = postgres_store(dsn, pool_size=2)
    await storage.open()
    conn = await asyncpg.connect(dsn)
    try:
        await storage.migrate()
        assert await storage.schema_version() < BEFORE
        tenant, owners = await _fill_old_schema(storage, conn)
        orders = {
            "job_events": "job_id, seq",
            "job_output_chunks": "job_id, seq",
            "outbox": "id",
            "webhook_attempts": "id",
        }
        before = {t: await _rows(conn, t, orders[t]) for t in HISTORY}
        assert {t: len(rows) for t, rows in before.items()} == {
            "job_events": 6,  # running and succeeded of three jobs (the first is implied)
            "job_output_chunks": 6,
            "outbox": 4,  # job.succeeded of three jobs to the endpoint, and the batch's
            "webhook_attempts": 3,
        }
        log_before = [
            dict(r) for r in await conn.fetch("SELECT * FROM job_event_log ORDER BY job_id, seq")
        ]

        to_newest()
        assert BEFORE in await storage.migrate()

        for table in HISTORY:
            after = await _rows(conn, table, orders[table])
            assert [
                {k: row[k] for k in old} for row, old in zip(after, before[table], strict=True)
            ] == before[table], table
            assert len(after) == len(before[table])
            assert all(row["job_created_at"] == owners[row["job_id"]] for row in after), table
            where = await _partition_of(conn, table)
            for row in after:
                key = (row["id"],) if "id" in row else (row["job_id"], row["seq"])
                assert where[key] == _expected_partition(table, owners[row["job_id"]]), key
        log_after = [
            {k: r[k] for k in log_before[0]}
            for r in await conn.fetch("SELECT * FROM job_event_log ORDER BY job_id, seq")
        ]
        assert log_after == log_before

        # The keys hold, with the partition key in them as their owner's one creation time.
        first = before["job_events"][0]
        with pytest.raises(asyncpg.UniqueViolationError):
            await conn.execute(
                "INSERT INTO job_events (job_id, seq, to_state, actor, created_at, job_created_at)"
                " VALUES ($1, $2, 'running', 'x', now(), $3)",
                first["job_id"],
                first["seq"],
                owners[first["job_id"]],
            )
        with pytest.raises(asyncpg.UniqueViolationError):
            await conn.execute(
                "INSERT INTO job_output_chunks (job_id, seq, generation, text, created_at,"
                " job_created_at) VALUES ('job_today', 1, 1, 'again', now(), $1)",
                owners["job_today"],
            )
        with pytest.raises(asyncpg.CheckViolationError):
            await conn.execute(
                "INSERT INTO job_output_chunks (job_id, seq, generation, text, created_at,"
                " continued_chars, job_created_at) VALUES ('job_today', 9, 1, 'x', now(), -1, $1)",
                owners["job_today"],
            )
        outbox = before["outbox"][0]
        with pytest.raises(asyncpg.UniqueViolationError):  # the fan-out's deduplication
            await conn.execute(
                "INSERT INTO outbox (id, event_id, tenant_id, job_id, event_type, target,"
                " series, job_status, created_at, next_attempt_at, job_created_at)"
                " VALUES ('msg_again', 'evt', $1, $2, $3, $4, $5, 'succeeded', now(), now(), $6)",
                outbox["tenant_id"],
                outbox["job_id"],
                outbox["event_type"],
                outbox["target"],
                outbox["series"],
                owners[outbox["job_id"]],
            )
        with pytest.raises(asyncpg.UniqueViolationError):
            attempt = before["webhook_attempts"][0]
            await conn.execute(
                "INSERT INTO webhook_attempts SELECT * FROM webhook_attempts WHERE id = $1",
                attempt["id"],
            )
        with pytest.raises(asyncpg.NotNullViolationError):  # no row without its partition key
            await conn.execute(
                "INSERT INTO job_events (job_id, seq, to_state, actor, created_at)"
                " VALUES ('job_today', 99, 'running', 'x', now())"
            )
        with pytest.raises(asyncpg.RaiseError, match="append-only"):
            await conn.execute("UPDATE job_events SET reason = 'edited'")

        # The store reads and writes the converted history: each job's log, output and
        # deliveries as they were, and a new transition writes its event and its outbox row.
        for job_id in ("job_today", "job_recent", "job_ancient"):
            assert [e.seq for e in await storage.job_events(job_id=job_id)] == [1, 2, 3]
            assert len(await storage.job_output_read(job_id=job_id, after_seq=0)) == 2
            assert len(await storage.delivery_attempts_for_job(job_id=job_id)) == 1
            assert len(await storage.outbox_for_job(job_id=job_id)) == 1
        fresh = (await submit_one(storage, job=new_job(tenant))).job
        await storage.job_cancel(job_id=fresh.id, tenant_id=tenant.id, actor="api")
        assert [e.to_state for e in await storage.job_events(job_id=fresh.id)] == [
            "queued",
            "cancelled",
        ]
        [entry] = await storage.outbox_for_job(job_id=fresh.id)
        assert entry.event_type == "job.cancelled"
        # The update trigger's setting of 0013 survives its restatement.
        config = await conn.fetchval(
            "SELECT proconfig FROM pg_proc WHERE proname = 'jobgate_jobs_after_update'"
        )
        assert config == ["enable_nestloop=off"]
        leftovers = await conn.fetchval(
            "SELECT count(*) FROM pg_class WHERE relname LIKE '%\\_unpartitioned'"
        )
        assert leftovers == 0
    finally:
        await conn.close()
        await storage.close()


async def test_days_ahead_exist_and_an_insert_outside_them_lands_in_default(pg_dsn: str) -> None:
    storage = postgres_store(pg_dsn, pool_size=2)
    await storage.open()
    conn = await asyncpg.connect(pg_dsn)
    try:
        for table in HISTORY:
            parts = {
                r["part"]
                for r in await conn.fetch(
                    "SELECT c.relname AS part FROM pg_inherits AS i"
                    " JOIN pg_class AS c ON c.oid = i.inhrelid WHERE i.inhparent = $1::regclass",
                    table,
                )
            }
            assert f"{table}_default" in parts
            for ahead in range(4):
                assert f"{table}_p{_today() + timedelta(days=ahead):%Y%m%d}" in parts, table

        tenant = await make_tenant(storage, "far")
        far = _midnight(_today() + timedelta(days=40)) + timedelta(hours=5)
        job = (await submit_one(storage, job=new_job(tenant), now=far)).job
        await storage.job_cancel(job_id=job.id, tenant_id=tenant.id, actor="api", now=far)
        where = await conn.fetchval(
            "SELECT tableoid::regclass::text FROM job_events WHERE job_id = $1", job.id
        )
        assert where == "job_events_default"
        assert [e.to_state for e in await storage.job_events(job_id=job.id)] == [
            "queued",
            "cancelled",
        ]
        # Its day's partition made later takes the row over from DEFAULT: still one row.
        made = await conn.fetchval(
            "SELECT jobgate_history_partition_ensure('job_events', $1::date)", far.date()
        )
        assert made is True
        rows = await conn.fetch(
            "SELECT tableoid::regclass::text AS part FROM job_events WHERE job_id = $1", job.id
        )
        assert [r["part"] for r in rows] == [f"job_events_p{far.date():%Y%m%d}"]
        assert [e.to_state for e in await storage.job_events(job_id=job.id)] == [
            "queued",
            "cancelled",
        ]
    finally:
        await conn.close()
        await storage.close()


async def test_reads_by_job_touch_its_partition_only(pg_dsn: str) -> None:
    """Each hot read by job id names its job's partition: the plan keeps one partition (the
    others pruned at start-up), read through that partition's index."""
    storage = postgres_store(pg_dsn, pool_size=1)
    await storage.open()
    conn = await asyncpg.connect(pg_dsn)
    try:
        tenant = await make_tenant(storage, "plans")
        job = (await submit_one(storage, job=new_job(tenant))).job
        reads: dict[str, dict[str, Any]] = {
            "job_events": {"job_id": job.id, "after_seq": 0, "limit": 100},
            "job_output_read": {"job_id": job.id, "after_seq": 0, "limit": 100},
            "job_output_chars": {"job_id": job.id, "generation": 1},
            "outbox_for_job": {"job_id": job.id},
            "delivery_attempts_for_job": {"job_id": job.id},
        }
        for name, params in reads.items():
            await conn.execute("SET enable_seqscan = off")
            plan = json.loads(
                await conn.fetchval(
                    "EXPLAIN (ANALYZE, COSTS OFF, FORMAT JSON) " + Q[name].positional_sql,
                    *Q[name].args(params),
                )
            )
            text = json.dumps(plan)
            scanned = {
                node["Relation Name"]
                for node in _nodes(plan[0]["Plan"])
                if "Relation Name" in node
                and node.get("Actual Loops", 0) > 0
                and node["Relation Name"] != "jobs"
                and node["Relation Name"] != "batches"
            }
            assert len(scanned) <= 1, (name, scanned)
            assert "Seq Scan" not in {
                n["Node Type"]
                for n in _nodes(plan[0]["Plan"])
                if n.get("Relation Name") not in (None, "jobs", "batches")
            }, (name, text)
    finally:
        await conn.close()
        await storage.close()


async def test_recording_and_releasing_a_delivery_plan_one_partition(pg_dsn: str) -> None:
    """A claimed delivery carries its row's partition key: recording it and releasing it plan
    one partition of outbox and of webhook_attempts, not every day's."""
    storage = postgres_store(pg_dsn, pool_size=2)
    await storage.open()
    conn = await asyncpg.connect(pg_dsn)
    planned: dict[str, dict[str, int]] = {}
    real = storage._sql.write_one

    async def explained(query: str, /, **params: Any) -> Any:
        if query in ("delivery_record", "delivery_release"):
            async with conn.transaction():
                plan = json.loads(
                    await conn.fetchval(
                        "EXPLAIN (ANALYZE, COSTS OFF, FORMAT JSON) " + Q[query].positional_sql,
                        *Q[query].args(params),
                    )
                )
                names = [
                    str(n["Relation Name"])
                    for n in _nodes(plan[0]["Plan"])
                    if str(n.get("Relation Name", "")).startswith(("outbox_p", "webhook_attempts"))
                ]
                planned[query] = {
                    table: sum(name.startswith(table) for name in names)
                    for table in ("outbox_p", "webhook_attempts_p")
                }
                raise _RolledBack
        return await real(query, **params)

    try:
        tenant = await make_tenant(storage, "deliveryplans")
        now = datetime.now(UTC)
        await make_endpoint(storage, tenant, FakeClock(now))
        await _finished(storage, tenant, now)
        await _finished(storage, tenant, now + timedelta(seconds=2))
        storage._sql.write_one = explained  # type: ignore[method-assign]
        later = now + timedelta(seconds=10)
        first, second = await storage.delivery_claim_due(limit=10, lease_s=30, now=later)
        for call in (
            storage.delivery_record(delivery=first, outcome=DELIVERED, now=later),
            storage.delivery_release(delivery=second, delay_s=60, now=later),
        ):
            with pytest.raises(_RolledBack):
                await call
        assert first.job_created_at is not None
        # The partitions a statement plans are those it may read: its own day's alone, once for
        # the attempt's read of the row and once for the update (the attempt's insert reads no
        # webhook_attempts partition).
        assert planned["delivery_record"] == {"outbox_p": 2, "webhook_attempts_p": 0}, planned
        assert planned["delivery_release"] == {"outbox_p": 1, "webhook_attempts_p": 0}, planned
    finally:
        storage._sql.write_one = real  # type: ignore[method-assign]
        await conn.close()
        await storage.close()


class _RolledBack(Exception):
    pass


def _nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    found = [node]
    for child in node.get("Plans", []):
        found += _nodes(child)
    return found


async def test_two_processes_making_the_same_days_both_succeed(pg_dsn: str) -> None:
    """Creators in several processes at once: each day's partitions are made once, and no
    caller fails."""
    conns = [await asyncpg.connect(pg_dsn) for _ in range(4)]
    try:
        days = [_today() + timedelta(days=10 + i) for i in range(3)]

        async def make(conn: asyncpg.Connection) -> int:
            made = 0
            async with conn.transaction():
                for table in HISTORY:
                    for day in days:
                        made += bool(
                            await conn.fetchval(
                                "SELECT jobgate_history_partition_ensure($1, $2::date)",
                                table,
                                day,
                            )
                        )
            return made

        results = await asyncio.gather(*(make(c) for c in conns))
        assert sum(results) == len(HISTORY) * len(days)
        for table in HISTORY:
            for day in days:
                assert await conns[0].fetchval(
                    "SELECT to_regclass($1)::text", f"{table}_p{day:%Y%m%d}"
                )
    finally:
        for conn in conns:
            await conn.close()


async def _history_rows(conn: asyncpg.Connection, job_id: str) -> dict[str, list[str]]:
    """Where each history table holds rows of the job (partition names), whatever reads see."""
    found: dict[str, list[str]] = {}
    for table in HISTORY:
        rows = await conn.fetch(
            f"SELECT tableoid::regclass::text AS part FROM {table} WHERE job_id = $1", job_id
        )
        found[table] = sorted({r["part"] for r in rows})
    return found


def _nowhere() -> dict[str, list[str]]:
    return {table: [] for table in HISTORY}


async def _exists(conn: asyncpg.Connection, relation: str) -> bool:
    return bool(await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", relation))


async def _finished(
    storage: PostgresStore, tenant: Tenant, at: datetime, *, key_ttl_s: float | None = None
) -> str:
    """A job created at `at`, streamed a chunk, finished a second later (its webhook pending)."""
    key = None if key_ttl_s is None else IdempotencyClaim("r", f"k-{at}", "h", 202, key_ttl_s)
    job = (await submit_one(storage, job=new_job(tenant), idempotency=key, now=at)).job
    [claimed] = await storage.job_claim(worker_id="w", limit=1, lease_ttl_s=60, now=at)
    lease = Lease(job.id, claimed.lease_token or "")
    await storage.job_output_append(lease=lease, text="partial", now=at)
    await finish_one(
        storage,
        finish=Finish(lease=lease, state=JobState.SUCCEEDED, reason="t", result={"ok": True}),
        now=at + timedelta(seconds=1),
    )
    return job.id


async def _deliver(storage: PostgresStore, at: datetime, *, skip: set[str]) -> None:
    for delivery in await storage.delivery_claim_due(limit=100, lease_s=30, now=at):
        if delivery.entry.job_id in skip:
            assert await storage.delivery_release(delivery=delivery, delay_s=3600, now=at)
        else:
            assert await storage.delivery_record(delivery=delivery, outcome=DELIVERED, now=at)


async def test_retention_drops_a_past_day_and_keeps_what_must_stay(
    pg_dsn: str, settings: Settings
) -> None:
    """Two past days: one whose jobs are all deleted is dropped whole; one holding jobs that
    must stay (a live idempotency key, a pending delivery) is kept while they are more than
    the pass may move, then dropped with their rows moved to DEFAULT, where the row-wise path
    deletes them with their jobs. Nothing a read can see changes but what retention deletes."""
    storage = postgres_store(pg_dsn, pool_size=2)
    await storage.open()
    conn = await asyncpg.connect(pg_dsn)
    try:
        now = datetime.now(UTC)
        busy_day, done_day = _today() - timedelta(days=10), _today() - timedelta(days=9)
        for table in HISTORY:
            for day in (busy_day, done_day):
                assert await conn.fetchval(
                    "SELECT jobgate_history_partition_ensure($1, $2::date)", table, day
                )
        tenant = await make_tenant(storage, "days")
        await make_endpoint(storage, tenant, FakeClock(now - 11 * DAY))
        noon = _midnight(busy_day) + timedelta(hours=12)
        gone = await _finished(storage, tenant, noon)
        keyed = await _finished(storage, tenant, noon + timedelta(minutes=1), key_ttl_s=30 * 86400)
        pending = await _finished(storage, tenant, noon + timedelta(minutes=2))
        other_day = await _finished(storage, tenant, _midnight(done_day) + timedelta(hours=1))
        await _deliver(storage, noon + timedelta(minutes=5), skip={pending})
        await _deliver(storage, _midnight(done_day) + timedelta(hours=2), skip={pending})
        busy = f"job_events_p{busy_day:%Y%m%d}"
        assert (await _history_rows(conn, keyed))["job_events"] == [busy]
        log_of = {j: await storage.job_events(job_id=j) for j in (keyed, pending)}

        strict = Retention(storage=storage, settings=settings, max_kept=1)
        deleted = await strict.sweep_once(now=now)
        assert deleted["jobs"] == 2  # gone and other_day: the others are kept
        assert deleted["history_partitions"] == len(HISTORY)  # done_day's, every table
        for table in HISTORY:
            assert (
                await conn.fetchval("SELECT to_regclass($1)", f"{table}_p{done_day:%Y%m%d}") is None
            )
            assert await conn.fetchval("SELECT to_regclass($1)", f"{table}_p{busy_day:%Y%m%d}")
        # busy_day's, every table: two of its jobs must stay, and the pass may move one.
        assert REGISTRY.get_sample_value("jobgate_history_partitions_blocked") == len(HISTORY)
        # The deleted job's rows wait in their day's partition, and no read finds them.
        assert await storage.job_get(job_id=gone) is None
        assert (await _history_rows(conn, gone))["job_events"] == [busy]
        assert await storage.job_events(job_id=gone) == []
        assert await storage.outbox_for_job(job_id=gone) == []
        assert await storage.delivery_attempts_for_job(job_id=gone) == []
        assert await storage.job_output_read(job_id=gone, after_seq=0) == []
        assert (await _history_rows(conn, other_day)) == _nowhere()

        # Room for the two kept jobs: the day goes, their rows move to DEFAULT and read the same.
        deleted = await Retention(storage=storage, settings=settings).sweep_once(now=now)
        assert deleted["history_partitions"] == len(HISTORY)
        assert REGISTRY.get_sample_value("jobgate_history_partitions_blocked") == 0
        for table in HISTORY:
            assert (
                await conn.fetchval("SELECT to_regclass($1)", f"{table}_p{busy_day:%Y%m%d}") is None
            )
        assert (await _history_rows(conn, gone)) == _nowhere()
        for job_id in (keyed, pending):
            where = await _history_rows(conn, job_id)
            assert where["job_events"] == ["job_events_default"]
            assert where["job_output_chunks"] == ["job_output_chunks_default"]
            assert where["outbox"] == ["outbox_default"]
            assert await storage.job_events(job_id=job_id) == log_of[job_id]
            assert len(await storage.job_output_read(job_id=job_id, after_seq=0)) == 1
        assert (await _history_rows(conn, keyed))["webhook_attempts"] == [
            "webhook_attempts_default"
        ]
        # The pending delivery is still sent from DEFAULT.
        [delivery] = await storage.delivery_claim_due(limit=10, lease_s=30, now=now + 2 * DAY)
        assert delivery.entry.job_id == pending
        assert await storage.delivery_record(delivery=delivery, outcome=DELIVERED, now=now)

        # Once their keys expire and deliveries end, the row-wise path deletes them from DEFAULT.
        later = now + 31 * DAY
        deleted = await Retention(storage=storage, settings=settings).sweep_once(now=later)
        assert deleted["jobs"] == 2
        for job_id in (keyed, pending):
            assert (await _history_rows(conn, job_id)) == _nowhere()
    finally:
        await conn.close()
        await storage.close()


async def test_each_pass_makes_the_days_ahead(pg_dsn: str, settings: Settings) -> None:
    storage = postgres_store(pg_dsn, pool_size=1)
    await storage.open()
    try:
        ahead = settings.model_copy(update={"partitions_ahead_days": 6})
        now = datetime.now(UTC)
        await Retention(storage=storage, settings=ahead).sweep_once(now=now)
        days = await history_days(storage.engine.executor)
        for table in HISTORY:
            for offset in range(7):
                assert _today() + timedelta(days=offset) in days[table], (table, offset)
        assert await storage.history_partitions_ensure(days_ahead=6, now=now) == 0  # idempotent
    finally:
        await storage.close()


async def test_a_day_held_back_is_told_without_locking_its_jobs(pg_dsn: str) -> None:
    """A day with more jobs that must stay than a pass may move is recognised by counting
    them: no row lock is taken (a job locked by another transaction does not make the drop
    wait), and nothing changes; with room for them, that lock is waited for (at most the lock
    timeout) before the table is touched."""
    storage = postgres_store(pg_dsn, pool_size=1)
    await storage.open()
    holder = await asyncpg.connect(pg_dsn)
    conn = await asyncpg.connect(pg_dsn)
    try:
        day = _today() - timedelta(days=20)
        assert await conn.fetchval(
            "SELECT jobgate_history_partition_ensure('job_events', $1::date)", day
        )
        tenant = await make_tenant(storage, "held")
        kept = await _finished(storage, tenant, _midnight(day) + timedelta(hours=3))
        transaction = holder.transaction()
        await transaction.start()
        await holder.execute("SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE", kept)
        drop = "SELECT jobgate_history_partition_drop('job_events', $1::date, $2, '200ms')"
        assert await conn.fetchval(drop, day, 0) == -1  # held back: told at once
        assert await conn.fetchval(drop, day, 10) == -2  # room, but the job is locked: busy
        assert await _exists(conn, f"job_events_p{day:%Y%m%d}")
        await transaction.rollback()
        assert await conn.fetchval(drop, day, 10) == 2  # its running and succeeded events
        assert not await _exists(conn, f"job_events_p{day:%Y%m%d}")
        assert [e.seq for e in await storage.job_events(job_id=kept)] == [1, 2, 3]
    finally:
        await conn.close()
        await holder.close()
        await storage.close()


async def test_a_row_of_the_day_committed_while_its_partition_is_made_moves_with_it(
    pg_dsn: str,
) -> None:
    """A row of a day with no partition yet goes to DEFAULT; one still uncommitted when that
    day's partition is being made is waited for, then moved into the new partition with the
    others: the making neither fails nor leaves it behind."""
    writer = await asyncpg.connect(pg_dsn)
    maker = await asyncpg.connect(pg_dsn)
    watcher = await asyncpg.connect(pg_dsn)
    try:
        day = _today() + timedelta(days=30)
        at = _midnight(day) + timedelta(hours=1)
        insert = (
            "INSERT INTO job_events (job_id, seq, to_state, actor, created_at, job_created_at)"
            " VALUES ($1, 2, 'running', 'x', $2, $2)"
        )
        await writer.execute(insert, "job_before", at)  # committed: in DEFAULT
        transaction = writer.transaction()
        await transaction.start()
        await writer.execute(insert, "job_during", at)  # not committed yet
        pid = maker.get_server_pid()
        making = asyncio.ensure_future(
            maker.fetchval("SELECT jobgate_history_partition_ensure('job_events', $1::date)", day)
        )

        async def waiting() -> bool:
            return bool(
                await watcher.fetchval(
                    "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $1", pid
                )
            )

        for _ in range(500):  # until the maker waits for the writer's lock (at most 5 s)
            if await waiting():
                break
            await asyncio.sleep(0.01)
        assert await waiting()
        await transaction.commit()
        assert await making is True
        rows = await watcher.fetch(
            "SELECT job_id, tableoid::regclass::text AS part FROM job_events"
            " WHERE job_id IN ('job_before', 'job_during') ORDER BY job_id"
        )
        part = f"job_events_p{day:%Y%m%d}"
        assert [(r["job_id"], r["part"]) for r in rows] == [
            ("job_before", part),
            ("job_during", part),
        ]
    finally:
        for conn in (writer, maker, watcher):
            await conn.close()
