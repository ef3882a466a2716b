"""A history of millions of finished jobs against none: the same measurements on an empty
PostgreSQL database and on one holding days of history (`python -m bench --only history`).

The history is loaded with COPY into a migrated database whose day partitions exist for every
day loaded (made by the migration's own function, as the reaper makes them): N finished jobs
spread evenly over `history_days` days of `created_at` ending yesterday, each with its
events (half of the jobs ran once: 3 events; half were retried once: 5; 4 a job on average),
one job in ten streamed (10 output chunks), one in five delivered a `job.succeeded` webhook
(an outbox row, its attempt, and a failed first attempt for one delivery in ten). The load
runs with `session_replication_role = replica` (no triggers: the rows are written as the
triggers would have, and the tenant exists), then the database is `VACUUM ANALYZE`d.

Measured on each database in the same order:

- claim latency: claims of 10 from 2,000 fresh queued jobs (bench.claim_history);
- drain: `drain_jobs` queued no-op jobs claimed and finished by 2 `jobgate worker` processes
  of 64 (bench.jobgate_drain), jobs/s and the CPU per job of the workers and PostgreSQL;
- status reads `GET /v1/jobs/{id}` at a fixed open-loop rate over 1,000 queued jobs, through
  one `jobgate api` process (bench.http_bench), first with those 1,000 queued, then with a
  backlog of `history_backlog` queued jobs of the same tenant ahead of them (COPY);
- long-poll wake latency across two `jobgate api` processes (bench.longpoll), at both
  backlogs;
- on the history: retention of the oldest day (the reaper's path: its jobs deleted in batches
  of 500, then its day partitions dropped), timed as a whole and the drop alone.

Both databases are dropped at the end.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg

from bench import claim_history, jobgate_drain, pg, procs
from bench.context import RunContext
from bench.http_bench import STATUS_JOBS, _load
from bench.jobgate_setup import new_tenant, open_runtime, submit_batches, submit_each
from bench.longpoll import _wake
from bench.results import Case
from jobgate.config import Settings
from jobgate.roles.retention import Retention
from jobgate.storage.postgres.partitions import HISTORY_TABLES
from jobgate.storage.postgres.store import postgres_store

SECTION = Path(__file__).with_name("history.md")
TITLE = "## A history of millions of jobs against none"
HISTORY_TENANT = "ten_history"
ENDPOINT_ID = "ep_history"
CHUNK = 20_000  # rows per COPY message
STATUS_RATE = 500  # status reads per second, open loop
DRAIN_CONFIG = (2, 64)  # worker processes x concurrency
# The API's admission bounds lifted: the backlog is the point, not a refusal.
UNBOUNDED_TOML = "max_queued_total = 1000000000\n\n[tenant_defaults]\nmax_queued = 0\n"

REQUEST = '{"model": "sim-echo", "messages": [{"role": "user", "content": "hi"}]}'
RESULT = '{"id": "chatcmpl-h", "choices": [{"message": {"role": "assistant", "content": "hi"}}]}'


def _stamp(day: date, second: float) -> str:
    whole = int(second)
    h, rest = divmod(whole, 3600)
    m, s = divmod(rest, 60)
    micro = int((second - whole) * 1_000_000)
    return f"{day.isoformat()} {h:02d}:{m:02d}:{s:02d}.{micro:06d}+00"


def _days(count: int) -> list[date]:
    today = datetime.now(UTC).date()
    return [today - timedelta(days=count - i) for i in range(count)]


def _when(i: int, days: list[date], per_day: int) -> tuple[date, float]:
    """Job i's day and second of that day: evenly spread, finished within the same day."""
    day = days[i % len(days)]
    return day, (i // len(days)) * (86_000 / per_day)


def _jobs(n: int, days: list[date]) -> Iterator[str]:
    per_day = -(-n // len(days))
    for i in range(n):
        day, second = _when(i, days, per_day)
        created = _stamp(day, second)
        started = _stamp(day, second + 0.2)
        done = _stamp(day, second + 1.5)
        retried = i % 2
        yield (
            f"job_h{i:010d}\t{HISTORY_TENANT}\tsucceeded\tsim\t/v1/chat/completions\tsim-echo\t"
            f"{REQUEST}\t{{}}\t{RESULT}\t{created}\t{created}\t{done}\t{started}\t{done}\t"
            f"{1 + retried}\t{1 + retried}\t{3 + 2 * retried}\tworker\tcompleted\n"
        )


_RUN = (("queued", "running", "claimed"), ("running", "succeeded", "completed"))
_RETRY = (
    ("queued", "running", "claimed"),
    ("running", "queued", "retry"),
    ("queued", "running", "claimed"),
    ("running", "succeeded", "completed"),
)


def _events(n: int, days: list[date]) -> Iterator[str]:
    per_day = -(-n // len(days))
    for i in range(n):
        day, second = _when(i, days, per_day)
        created = _stamp(day, second)
        job = f"job_h{i:010d}"
        lines = [f"{job}\t1\t\\N\tqueued\tapi\tsubmitted\tt\t{created}\t{created}\n"]
        for seq, (a, b, why) in enumerate(_RETRY if i % 2 else _RUN, start=2):
            at = _stamp(day, second + 0.1 * seq)
            lines.append(f"{job}\t{seq}\t{a}\t{b}\tworker\t{why}\tt\t{at}\t{created}\n")
        yield "".join(lines)


def _chunks(n: int, days: list[date]) -> Iterator[str]:
    per_day = -(-n // len(days))
    text = "a streamed delta of forty characters ..."
    for i in range(0, n, 10):
        day, second = _when(i, days, per_day)
        created = _stamp(day, second)
        job = f"job_h{i:010d}"
        yield "".join(
            f"{job}\t{seq}\t1\t{text}\t{_stamp(day, second + 0.3 + seq / 100)}\t0\t{created}\n"
            for seq in range(1, 11)
        )


def _outbox(n: int, days: list[date]) -> Iterator[str]:
    per_day = -(-n // len(days))
    for i in range(0, n, 5):
        day, second = _when(i, days, per_day)
        created = _stamp(day, second)
        done = _stamp(day, second + 1.5)
        sent = _stamp(day, second + 1.6)
        attempts = 2 if i % 50 == 0 else 1
        yield (
            f"msg_h{i:010d}\tevt_h{i:010d}\t{HISTORY_TENANT}\tjob_h{i:010d}\tjob.succeeded\t"
            f"{ENDPOINT_ID}\t{ENDPOINT_ID}\t\\N\t0\tsucceeded\t{done}\tsucceeded\t{attempts}\t"
            f"{sent}\t\\N\t200\t\\N\t{sent}\t{created}\n"
        )


def _attempts(n: int, days: list[date]) -> Iterator[str]:
    per_day = -(-n // len(days))
    for i in range(0, n, 5):
        day, second = _when(i, days, per_day)
        created = _stamp(day, second)
        sent = _stamp(day, second + 1.6)
        head = f"msg_h{i:010d}\tevt_h{i:010d}\t{HISTORY_TENANT}\tjob_h{i:010d}\t{ENDPOINT_ID}"
        line = f"att_h{i:010d}\t{head}\t1\t200\t12\t\\N\tt\t{sent}\t{created}\n"
        if i % 50 == 0:
            line = (
                f"att_h{i:010d}f\t{head}\t1\t503\t30\tHTTP 503\tf\t{sent}\t{created}\n"
                + f"att_h{i:010d}\t{head}\t2\t200\t12\t\\N\tt\t{sent}\t{created}\n"
            )
        yield line


def _backlog(n: int, start: int) -> Iterator[str]:
    """`n` queued jobs of the bench tenant, due an hour ago (ahead of anything submitted)."""
    base = datetime.now(UTC) - timedelta(hours=1)
    day = base.date()
    second = base.hour * 3600 + base.minute * 60 + base.second
    for i in range(start, start + n):
        run_at = _stamp(day, second + i / 1_000_000)
        yield f"job_b{i:010d}\t@TENANT@\tqueued\tsim\t/v1/chat/completions\tsim-echo\t{REQUEST}\t{{}}\t\\N\t{run_at}\t{run_at}\t{run_at}\t\\N\t\\N\t0\t0\t1\tapi\tsubmitted\n"  # noqa: E501


COLUMNS = {
    "jobs": (
        "id", "tenant_id", "state", "provider", "endpoint", "model", "request", "metadata",
        "result", "run_at", "created_at", "updated_at", "started_at", "completed_at", "attempt",
        "run_count", "event_seq", "transition_actor", "transition_reason",
    ),
    "job_events": (
        "job_id", "seq", "from_state", "to_state", "actor", "reason", "applied", "created_at",
        "job_created_at",
    ),
    "job_output_chunks": (
        "job_id", "seq", "generation", "text", "created_at", "continued_chars", "job_created_at",
    ),
    "outbox": (
        "id", "event_id", "tenant_id", "job_id", "event_type", "target", "endpoint_id", "url",
        "series", "job_status", "created_at", "state", "attempts", "next_attempt_at",
        "lease_token", "last_status_code", "last_error", "completed_at", "job_created_at",
    ),
    "webhook_attempts": (
        "id", "outbox_id", "event_id", "tenant_id", "job_id", "target", "attempt",
        "status_code", "latency_ms", "error", "succeeded", "created_at", "job_created_at",
    ),
}  # fmt: skip


async def _chunked(lines: Iterator[str], replace: tuple[str, str] | None) -> AsyncIterator[bytes]:
    batch: list[str] = []
    for line in lines:
        batch.append(line)
        if len(batch) >= CHUNK:
            text = "".join(batch)
            yield (text.replace(*replace) if replace else text).encode()
            batch = []
            await asyncio.sleep(0)
    if batch:
        text = "".join(batch)
        yield (text.replace(*replace) if replace else text).encode()


async def _copy(
    conn: asyncpg.Connection,
    table: str,
    lines: Iterator[str],
    columns: tuple[str, ...],
    replace: tuple[str, str] | None = None,
) -> int:
    status = await conn.copy_to_table(
        table, source=_chunked(lines, replace), columns=list(columns), format="text"
    )
    return int(status.split()[-1])


async def load_history(ctx: RunContext, dsn: str, jobs: int, days: list[date]) -> dict[str, Any]:
    """The history of `jobs` finished jobs over `days` (see the module's docstring), loaded
    with COPY; rows per table and seconds."""
    conn = await asyncpg.connect(dsn)
    rows: dict[str, int] = {}
    try:
        await conn.execute(
            "INSERT INTO tenants (id, name, webhook_secret, created_at) "
            "VALUES ($1, 'history', 'whsec_h', now()) ON CONFLICT DO NOTHING",
            HISTORY_TENANT,
        )
        for table in HISTORY_TABLES:
            for day in days:
                await conn.execute("SELECT jobgate_history_partition_ensure($1, $2)", table, day)
        started = time.monotonic()
        await conn.execute("SET session_replication_role = replica")
        for table, lines in (
            ("jobs", _jobs(jobs, days)),
            ("job_events", _events(jobs, days)),
            ("job_output_chunks", _chunks(jobs, days)),
            ("outbox", _outbox(jobs, days)),
            ("webhook_attempts", _attempts(jobs, days)),
        ):
            began = time.monotonic()
            rows[table] = await _copy(conn, table, lines, COLUMNS[table])
            ctx.say(
                f"history: {rows[table]:,} rows into {table} in {time.monotonic() - began:.0f} s"
            )
        await conn.execute("RESET session_replication_role")
        copied_s = time.monotonic() - started
        await conn.execute("VACUUM ANALYZE")
        size = await conn.fetchval("SELECT pg_database_size(current_database())")
    finally:
        await conn.close()
    return {
        "rows": rows,
        "copy_s": round(copied_s, 1),
        "load_s": round(time.monotonic() - started, 1),
        "database_gib": round(size / 2**30, 2),
    }


async def _add_backlog(dsn: str, tenant_id: str, count: int) -> float:
    """`count` queued jobs of `tenant_id` ahead of every job submitted so far (COPY); s."""
    conn = await asyncpg.connect(dsn)
    try:
        started = time.monotonic()
        await conn.execute("SET session_replication_role = replica")
        await _copy(conn, "jobs", _backlog(count, 0), BACKLOG_COLUMNS, ("@TENANT@", tenant_id))
        await conn.execute("RESET session_replication_role")
        await conn.execute("VACUUM ANALYZE jobs")
        return time.monotonic() - started
    finally:
        await conn.close()


BACKLOG_COLUMNS = (
    "id", "tenant_id", "state", "provider", "endpoint", "model", "request", "metadata",
    "result", "run_at", "created_at", "updated_at", "started_at", "completed_at", "attempt",
    "run_count", "event_seq", "transition_actor", "transition_reason",
)  # fmt: skip


async def _claims(dsn: str, tenant_id: str) -> dict[str, float]:
    storage = postgres_store(dsn, pool_size=2)
    await storage.open()
    try:
        return claim_history.summary(await claim_history.claim_timings(storage, [tenant_id]))
    finally:
        await storage.close()


async def _drain(ctx: RunContext, dsn: str, tenant_id: str) -> dict[str, Any]:
    jobs = ctx.sizes.drain_jobs
    conn = await asyncpg.connect(dsn)
    try:
        since = await conn.fetchval("SELECT now()")
    finally:
        await conn.close()
    runtime = await open_runtime(dsn)
    try:
        await submit_batches(runtime, tenant_id, jobs, batch=1000)
    finally:
        await runtime.close()
    await pg.analyze(dsn)
    processes, concurrency = DRAIN_CONFIG
    case = await jobgate_drain.drain_in(
        ctx, dsn, processes=processes, concurrency=concurrency, jobs=jobs, since=since
    )
    return case.metrics


async def _reads(
    ctx: RunContext, dsn: str, api_key: str, job_ids: list[str], label: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Status reads at STATUS_RATE through one API process, then long-poll wake-ups across
    two: (status metrics, wake metrics)."""
    directory = ctx.scratch(f"history-{label}")
    (directory / "jobgate.toml").write_text(UNBOUNDED_TOML)
    env = procs.jobgate_env(dsn, directory)
    servers = procs.start_apis(
        f"history-{label}", 2, env=env, workdir=directory, log_dir=ctx.log_dir
    )
    try:
        urls = [await asyncio.to_thread(procs.wait_listening, s) for s in servers]
        await asyncio.sleep(1)
        [status] = await _load(
            ctx, "postgres", urls[0], api_key, job_ids, servers[:1], {}, dsn=dsn,
            ops=(("status", (STATUS_RATE,)),), wait_idle=False, name=f"history-{label}",
        )  # fmt: skip
        wake = await _wake(ctx, f"postgres-{label}", api_key, urls[0], urls[1], {})
    finally:
        for server in servers:
            await asyncio.to_thread(server.stop)
    status.metrics["note"] = status.note  # type: ignore[assignment]
    return status.metrics, wake.metrics


async def _retention(dsn: str, days: list[date]) -> dict[str, Any]:
    """The oldest day past retention: the reaper's sweep (its jobs deleted in batches of 500,
    then its partitions dropped), timed whole and the drop alone."""
    storage = postgres_store(dsn, pool_size=2)
    await storage.open()
    settings = Settings(database_url=dsn)
    drop = storage.history_partitions_drop
    dropped_s: list[float] = []

    async def timed_drop(**kwargs: Any) -> Any:
        began = time.monotonic()
        try:
            return await drop(**kwargs)
        finally:
            dropped_s.append(time.monotonic() - began)

    storage.history_partitions_drop = timed_drop  # type: ignore[method-assign]
    try:
        first = days[0] + timedelta(days=1)
        now = datetime(first.year, first.month, first.day, tzinfo=UTC) + timedelta(
            seconds=settings.retention_s
        )
        retention = Retention(storage=storage, settings=settings, max_batches=10**9)
        began = time.monotonic()
        deleted = await retention.sweep_once(now=now)
        took = time.monotonic() - began
    finally:
        await storage.close()
    return {
        "jobs_deleted": deleted["jobs"],
        "partitions_dropped": deleted["history_partitions"],
        "sweep_s": round(took, 2),
        "drop_s": round(sum(dropped_s), 2),
    }


async def _measure(ctx: RunContext, dsn: str, history: bool, days: list[date]) -> dict[str, Any]:
    sizes = ctx.sizes
    figures: dict[str, Any] = {}
    runtime = await open_runtime(dsn)
    try:
        tenant_id, api_key = await new_tenant(runtime)
    finally:
        await runtime.close()
    ctx.say(f"history ({'history' if history else 'empty'}): claims")
    figures["claim"] = await _claims(dsn, tenant_id)
    ctx.say(f"history ({'history' if history else 'empty'}): drain")
    figures["drain"] = await _drain(ctx, dsn, tenant_id)
    runtime = await open_runtime(dsn)
    try:
        job_ids = await submit_each(runtime, tenant_id, STATUS_JOBS)
    finally:
        await runtime.close()
    await pg.analyze(dsn)
    label = "history" if history else "empty"
    ctx.say(f"history ({label}): status and wake at {STATUS_JOBS:,} queued")
    figures["status_small"], figures["wake_small"] = await _reads(
        ctx, dsn, api_key, job_ids, f"{label}-small"
    )
    ctx.say(f"history ({label}): backlog of {sizes.history_backlog:,} queued")
    figures["backlog_s"] = round(await _add_backlog(dsn, tenant_id, sizes.history_backlog), 1)
    ctx.say(f"history ({label}): status and wake at {sizes.history_backlog + STATUS_JOBS:,} queued")
    figures["status_large"], figures["wake_large"] = await _reads(
        ctx, dsn, api_key, job_ids, f"{label}-large"
    )
    if history:
        ctx.say("history: retention of the oldest day")
        figures["retention"] = await _retention(dsn, days)
    return figures


async def measure(ctx: RunContext) -> list[Case]:
    """The section: the empty database, then the history's (loaded first), each dropped."""
    sizes = ctx.sizes
    days = _days(sizes.history_days)
    config = {
        "history_jobs": sizes.history_jobs,
        "days": sizes.history_days,
        "backlog": sizes.history_backlog + STATUS_JOBS,
        "status_rate": STATUS_RATE,
    }
    cases = []
    load_start = [round(x, 2) for x in os.getloadavg()]
    async with pg.fresh("hist_empty") as dsn:
        empty = await _measure(ctx, dsn, False, days)
    cases.append(Case("history", "jobgate", "postgres", "empty", config, _flat(empty)))
    async with pg.fresh("hist_full") as dsn:
        runtime = await open_runtime(dsn)  # migrated
        await runtime.close()
        ctx.say(f"history: loading {sizes.history_jobs:,} jobs over {len(days)} days")
        loaded = await load_history(ctx, dsn, sizes.history_jobs, days)
        ctx.say(f"history: loaded {loaded}")
        full = await _measure(ctx, dsn, True, days)
        full["load"] = loaded
    load_end = [round(x, 2) for x in os.getloadavg()]
    cases.append(Case("history", "jobgate", "postgres", "history", config, _flat(full)))
    for case in cases:
        case.metrics["load_average_start"] = load_start  # type: ignore[assignment]
        case.metrics["load_average_end"] = load_end  # type: ignore[assignment]
    return cases


def _flat(figures: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in figures.items():
        if isinstance(value, dict) and key != "load":
            for inner, v in value.items():
                out[f"{key}.{inner}"] = v
        else:
            out[key] = value
    return out
