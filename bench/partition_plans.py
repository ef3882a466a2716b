"""The hot statements that touch the history tables, before and after their partitioning by day
(PostgreSQL migrations 0088-0089), timed by EXPLAIN ANALYZE on two throwaway databases that
hold the same rows.

`python -m bench.partition_plans [--jobs N] [--runs R] [--before-rev REV]` (on
JOBGATE_TEST_DATABASE_URL's server): both databases are migrated to the version before 0088
and filled alike (N finished jobs over the last five days, each with two stored events, two
output chunks, a delivered outbox row and its attempt; 2,000 queued and 2,000 running jobs of
today; 200 pending deliveries); one is then converted (timed) and migrated to the newest. Each
statement runs R times per database on random jobs, in a transaction rolled back when it
writes; the statements of the unpartitioned database are those of `--before-rev` (git), the
others the working tree's. Then retention deletes the oldest day on both, row by row on the
unpartitioned one, by its batches and the drop of the day on the other (timed). Prints one
JSON object: per statement, the median planning and execution time (ms, triggers included)
and call time through a prepared statement, before and after, with the partitions one call
read; the retention figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
from tests.support.databases import admin_dsn, dsn_for

from jobgate.domain.retention import Horizon
from jobgate.storage import migrations, sql
from jobgate.storage.postgres.executor import Q as AFTER
from jobgate.storage.postgres.store import postgres_store

CONVERSION = 88
QUEUED = 2_000
RUNNING = 2_000
PENDING = 200

FILL = """
INSERT INTO tenants VALUES ('ten_b', 'b', 'whsec_b', now());
INSERT INTO webhook_endpoints (id, tenant_id, url, secret, created_at, updated_at)
VALUES ('ep_b', 'ten_b', 'https://example.com/h', 'whsec_x', now(), now());
INSERT INTO jobs (id, tenant_id, state, provider, endpoint, model, request, run_at, created_at,
                  updated_at, started_at, completed_at, attempt, run_count, event_seq,
                  transition_actor, transition_reason, result)
SELECT 'job_d' || i, 'ten_b', 'succeeded', 'sim', '/v1/chat/completions', 'm', '{}',
       t, t, t, t, t + interval '1 second', 1, 1, 3, 'api', 'submitted', '{"ok": true}'
  FROM (SELECT i, now() - (i % 5) * interval '1 day' - (i % 997) * interval '1 second' AS t
          FROM generate_series(1, @jobs@) AS i) AS g;
DELETE FROM job_events;  -- the first event the insert trigger stored for these rows
INSERT INTO job_events (job_id, seq, from_state, to_state, actor, reason, created_at)
SELECT j.id, s.seq, s.f, s.t, 'worker', 'x', j.created_at
  FROM jobs AS j, (VALUES (2, 'queued', 'running'), (3, 'running', 'succeeded')) AS s(seq, f, t)
 WHERE j.id LIKE 'job_d%';
INSERT INTO job_output_chunks (job_id, seq, generation, text, created_at)
SELECT j.id, s, 1, repeat('x', 200), j.created_at
  FROM jobs AS j, generate_series(1, 2) AS s WHERE j.id LIKE 'job_d%';
INSERT INTO outbox (id, event_id, tenant_id, job_id, event_type, target, endpoint_id, series,
                    job_status, created_at, state, attempts, next_attempt_at, completed_at)
SELECT 'msg_' || j.id, 'evt_' || j.id, 'ten_b', j.id, 'job.succeeded', 'ep_b', 'ep_b', 0,
       'succeeded', j.completed_at, 'succeeded', 1, j.completed_at, j.completed_at
  FROM jobs AS j WHERE j.id LIKE 'job_d%';
INSERT INTO webhook_attempts (id, outbox_id, event_id, tenant_id, job_id, target, attempt,
                              status_code, latency_ms, succeeded, created_at)
SELECT 'att_' || o.id, o.id, o.event_id, 'ten_b', o.job_id, 'ep_b', 1, 200, 3, true,
       o.completed_at
  FROM outbox AS o;
UPDATE outbox SET state = 'pending', next_attempt_at = now() - interval '1 minute',
                  completed_at = NULL
 WHERE id IN (SELECT id FROM outbox ORDER BY id LIMIT @pending@);
INSERT INTO jobs (id, tenant_id, state, provider, endpoint, model, request, run_at, created_at,
                  updated_at, event_seq, transition_actor, transition_reason)
SELECT 'job_q' || i, 'ten_b', 'queued', 'sim', '/v1/chat/completions', 'm', '{}', now(), now(),
       now(), 1, 'api', 'submitted'
  FROM generate_series(1, @queued@) AS i;
INSERT INTO jobs (id, tenant_id, state, provider, endpoint, model, request, run_at, created_at,
                  updated_at, started_at, attempt, run_count, event_seq, lease_owner,
                  lease_token, lease_expires_at, transition_actor, transition_reason)
SELECT 'job_r' || i, 'ten_b', 'running', 'sim', '/v1/chat/completions', 'm', '{}', now(),
       now(), now(), now(), 1, 1, 2, 'w', 'tok', now() + interval '1 hour', 'api', 'submitted'
  FROM generate_series(1, @running@) AS i;
"""

# The transitions the worker makes, as the claim and the finish write them (the job trigger
# appends the event, and on a finish the webhook row).
CLAIM = """
UPDATE jobs SET state = 'running', attempt = attempt + 1, run_count = run_count + 1,
       started_at = now(), updated_at = now(), lease_owner = 'w', lease_token = 'tok2',
       lease_expires_at = now() + interval '1 minute', event_seq = event_seq + 1,
       transition_actor = 'worker', transition_reason = 'claimed'
 WHERE id = $1
"""
FINISH = """
UPDATE jobs SET state = 'succeeded', completed_at = now(), updated_at = now(),
       result = '{"ok": true}', lease_token = NULL, event_seq = event_seq + 1,
       transition_actor = 'worker', transition_reason = 'done'
 WHERE id = $1 AND lease_token = 'tok'
"""


def _queries_at(rev: str) -> dict[str, sql.Query]:
    """The PostgreSQL statements as they were at git revision `rev`."""
    root = "src/jobgate/storage/postgres"
    names = subprocess.run(
        ["git", "ls-tree", "--name-only", f"{rev}:{root}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    files = [
        (name, subprocess.run(["git", "show", f"{rev}:{root}/{name}"], check=True,
                              capture_output=True, text=True).stdout)
        for name in sorted(names)
        if name.startswith("queries") and name.endswith(".sql")
    ]  # fmt: skip
    return sql._parse_files(files)


async def _admin(statement: str) -> None:
    conn = await asyncpg.connect(admin_dsn())
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


async def _database(name: str, jobs: int, *, convert: bool) -> tuple[str, float | None]:
    """A database filled at the schema before the conversion; converted if asked (seconds)."""
    await _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    await _admin(f'CREATE DATABASE "{name}"')
    dsn = dsn_for(name)
    real = migrations.pending
    migrations.pending = lambda package, applied: [
        m for m in real(package, applied) if m.version < CONVERSION
    ]
    storage = postgres_store(dsn, pool_size=1)
    await storage.open()
    try:
        await storage.migrate()
        conn = await asyncpg.connect(dsn)
        try:
            counts = {"jobs": jobs, "pending": PENDING, "queued": QUEUED, "running": RUNNING}
            script = FILL
            for name, count in counts.items():
                script = script.replace(f"@{name}@", str(count))
            await conn.execute(script)
            await conn.execute("ANALYZE")
        finally:
            await conn.close()
        migrations.pending = real
        took = None
        if convert:
            started = time.monotonic()
            await storage.migrate()
            took = time.monotonic() - started
            conn = await asyncpg.connect(dsn)
            try:
                await conn.execute("ANALYZE")
            finally:
                await conn.close()
        return dsn, took
    finally:
        migrations.pending = real
        await storage.close()


def _relations(node: dict[str, Any]) -> list[str]:
    found = [node["Relation Name"]] if "Relation Name" in node else []
    if node.get("Actual Loops", 1) == 0:
        return []
    for child in node.get("Plans", []):
        found += _relations(child)
    return found


async def _time(conn: asyncpg.Connection, text: str, args: list[Any]) -> None:
    async with conn.transaction():
        [row] = await conn.fetch("EXPLAIN (ANALYZE, FORMAT JSON) " + text, *args)
        plan = json.loads(row[0])[0]
        spent = (plan["Planning Time"], plan["Execution Time"])
        touched = {
            name
            for name in _relations(plan["Plan"])
            if name.startswith(("job_events", "job_output_chunks", "outbox", "webhook_attempts"))
        }
        raise _Rollback(spent, touched)


class _Rollback(Exception):
    def __init__(self, spent: tuple[float, float], touched: set[str]) -> None:
        self.spent, self.touched = spent, touched


Case = Callable[[], tuple[str, list[Any]]]


def _cases(
    queries: dict[str, sql.Query], jobs: int, pending: list[tuple[str, datetime]]
) -> dict[str, Case]:
    """Each statement with fresh arguments per call (the same sequence for both databases)."""
    rng = random.Random(7)

    def done() -> str:
        return f"job_d{rng.randint(1, jobs)}"

    def named(name: str, **params: Any) -> tuple[str, list[Any]]:
        q = queries[name]
        return q.positional_sql, q.args(params)

    return {
        "claim (UPDATE jobs, trigger appends the event)": lambda: (
            CLAIM, [f"job_q{rng.randint(1, QUEUED)}"]),
        "finish (UPDATE jobs, trigger appends event and webhook row)": lambda: (
            FINISH, [f"job_r{rng.randint(1, RUNNING)}"]),
        "job_events (GET /v1/jobs/{id}/events)": lambda: named(
            "job_events", job_id=done(), after_seq=0, limit=100),
        "job_output_read (stream replay by job and seq)": lambda: named(
            "job_output_read", job_id=done(), after_seq=0, limit=100),
        "job_output_append": lambda: named(
            "job_output_append", job_id=f"job_r{rng.randint(1, RUNNING)}",
            lease_token="tok", text="delta", continued_chars=0, now=None),
        "outbox_for_job": lambda: named("outbox_for_job", job_id=done()),
        "delivery_attempts_for_job (GET /v1/jobs/{id}/deliveries)": lambda: named(
            "delivery_attempts_for_job", job_id=done()),
        "delivery_claim (10 due of 200 pending)": lambda: named(
            "delivery_claim", limit=10, lease_s=30.0, busy="[]", now=None),
        "delivery_record (attempt insert + fenced update)": lambda: named(
            "delivery_record", id=(msg := rng.choice(pending))[0], token="none",
            event_id="evt_" + msg[0][4:], tenant_id="ten_b", job_id=msg[0][4:],
            job_created_at=msg[1], target="ep_b", attempt=2, attempted=True, status_code=500,
            latency_ms=3, error="x", state="pending", retry_in_s=30.0, endpoint_id="ep_b",
            disable_reason=None, now=None),
        "delivery_release (fenced update)": lambda: named(
            "delivery_release", id=(msg := rng.choice(pending))[0], job_id=msg[0][4:],
            job_created_at=msg[1], token="none", delay_s=1.0, now=None),
    }  # fmt: skip


_PREPARED: dict[tuple[int, str], Any] = {}


async def _run(conn: asyncpg.Connection, case: Case) -> tuple[float, float, int, float]:
    """One call explained (planned afresh: what a call through PgBouncer pays), then one more
    through a prepared statement, timed at the client (what a direct connection pays once
    PostgreSQL's plan cache has settled), each rolled back."""
    text, args = case()
    try:
        await _time(conn, text, args)
    except _Rollback as done:
        planning, execution, touched = done.spent[0], done.spent[1], len(done.touched)
    text, args = case()
    key = (id(conn), text)
    if key not in _PREPARED:
        _PREPARED[key] = await conn.prepare(text)
    statement = _PREPARED[key]
    transaction = conn.transaction()
    await transaction.start()
    started = time.perf_counter()
    await statement.fetch(*args)
    prepared = (time.perf_counter() - started) * 1000
    await transaction.rollback()
    return planning, execution, touched, prepared


async def _measure(
    dsns: dict[str, str], queries: dict[str, dict[str, sql.Query]], jobs: int, runs: int
) -> dict[str, Any]:
    """Every statement `runs` times on each database, the databases taking turns (the load of a
    shared machine falls on both alike): median planning and execution (ms, triggers
    included), and the most history partitions one execution read."""
    conns = {side: await asyncpg.connect(dsn) for side, dsn in dsns.items()}
    try:
        pending = [
            (r["id"], r["created_at"])
            for r in await conns["before"].fetch(
                "SELECT o.id, j.created_at FROM outbox AS o JOIN jobs AS j ON j.id = o.job_id "
                "WHERE o.state = 'pending'"
            )
        ]
        cases = {side: _cases(queries[side], jobs, pending) for side in dsns}
        figures: dict[str, Any] = {}
        for label in cases["before"]:
            seen: dict[str, list[tuple[float, float, int, float]]] = {side: [] for side in dsns}
            for _ in range(runs):
                for side, conn in conns.items():
                    seen[side].append(await _run(conn, cases[side][label]))
            figures[label] = {
                side: {
                    "planning_ms": round(statistics.median(r[0] for r in rows), 3),
                    "execution_ms": round(statistics.median(r[1] for r in rows), 3),
                    "history_tables_read": max(r[2] for r in rows),
                    "prepared_call_ms": round(statistics.median(r[3] for r in rows), 3),
                }
                for side, rows in seen.items()
            }
        return figures
    finally:
        for conn in conns.values():
            await conn.close()


async def _retention_of_a_day(
    dsns: dict[str, str], queries: dict[str, dict[str, sql.Query]]
) -> dict[str, Any]:
    """Retention of the oldest day of history on each database: the row-wise batches of 500
    jobs (as retention runs them), then on the partitioned one the drop of that day (seconds)."""
    day = datetime.now(UTC).date() - timedelta(days=4)
    horizon = Horizon(
        now=datetime.now(UTC),
        completed_before=datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(days=1),
    )
    figures: dict[str, Any] = {}
    for side, dsn in dsns.items():
        q = queries[side]["retention_delete"]
        params = {"completed_before": horizon.completed_before, "now": horizon.now, "limit": 500}
        conn = await asyncpg.connect(dsn)
        try:
            jobs = 0
            started = time.monotonic()
            while True:
                row = await conn.fetchrow(q.positional_sql, *q.args(params))
                jobs += row["jobs"]
                if row["jobs"] < 500:
                    break
            figures[side] = {
                "jobs_deleted": jobs,
                "row_wise_s": round(time.monotonic() - started, 2),
            }
        finally:
            await conn.close()
    storage = postgres_store(dsns["after"], pool_size=1)
    await storage.open()
    try:
        started = time.monotonic()
        drops = await storage.history_partitions_drop(horizon=horizon, max_kept=1000)
        figures["after"]["drop_s"] = round(time.monotonic() - started, 2)
        figures["after"]["partitions_dropped"] = drops.dropped
        figures["after"]["rows_moved_to_default"] = drops.moved_rows
    finally:
        await storage.close()
    return figures


async def main(jobs: int, runs: int, before_rev: str) -> dict[str, Any]:
    before_dsn, _ = await _database("jobgate_plans_before", jobs, convert=False)
    after_dsn, converted_s = await _database("jobgate_plans_after", jobs, convert=True)
    try:
        dsns = {"before": before_dsn, "after": after_dsn}
        queries = {"before": _queries_at(before_rev), "after": AFTER}
        statements = await _measure(dsns, queries, jobs, runs)
        retention = await _retention_of_a_day(dsns, queries)
    finally:
        await _admin('DROP DATABASE IF EXISTS "jobgate_plans_before" WITH (FORCE)')
        await _admin('DROP DATABASE IF EXISTS "jobgate_plans_after" WITH (FORCE)')
    return {"jobs": jobs, "runs": runs, "conversion_s": round(converted_s or 0.0, 2),
            "statements": statements, "retention_of_a_day": retention}  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--before-rev", default="2f924da")
    options = parser.parse_args()
    print(json.dumps(asyncio.run(main(options.jobs, options.runs, options.before_rev)), indent=2))
