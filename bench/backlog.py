"""Status reads behind a backlog: what `GET /v1/jobs/{id}` of a queued job costs the database
at 1,000, 100,000 and 1,000,000 queued jobs of one tenant.

For each size a throwaway PostgreSQL database is migrated and filled with N queued jobs of
one tenant in one `INSERT ... SELECT generate_series` (one priority, run_at a microsecond
apart, all claimable), then `VACUUM ANALYZE`d. The timed call is Storage.job_status, the one
statement a status read runs (the job's view, its place in line, the pause covering it), from
one caller, one read at a time, round-robin over jobs at places 1, 2, 50, 101 (the first floor),
the middle of the line and its end, after a warm-up. Every size is filled first; then each
round times every size in turn (R reads each), so that the sizes share the machine's moods.
Latency is the caller's wall clock around the await (asyncpg over loopback, no HTTP).

For contrast the count that migration 0053 replaced (0029's forward count, re-created in the
same database under another name) is timed for the job at the head of the line, the job
that walked the whole line with it.

    python -m bench.backlog --sizes 1000,100000,1000000 [--reads 3000] [--rounds 3] [--docs]

--docs writes the table to bench/backlog.md, which docs/benchmarks.md includes (bench.report).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg

from bench import pg
from bench.results import percentile
from jobgate.storage.postgres.store import PostgresStore, postgres_store

TENANT = "ten_backlog"
SECTION = Path(__file__).with_name("backlog.md")
TITLE = "## Status reads behind a backlog"

FILL = """
INSERT INTO jobs (id, tenant_id, state, provider, endpoint, model, request, priority, run_at,
                  created_at, updated_at, event_seq, transition_actor, transition_reason)
SELECT 'job_' || lpad(g::text, 9, '0'), $1, 'queued', 'sim', '/v1/chat/completions', 'sim-echo',
       '{"model": "sim-echo", "messages": [{"role": "user", "content": "hi"}]}'::jsonb, 5,
       now() - interval '1 hour' + g * interval '1 microsecond', now(), now(), 1, 'api',
       'submitted'
  FROM generate_series(1, $2::integer) AS g
"""

# Migration 0029's count, for contrast: forward from the head of the line, bounded by LIMIT.
OLD_COUNT = """
CREATE FUNCTION bench_old_queue_position(p_tenant_id text, p_priority integer,
                                         p_run_at timestamptz, p_id text, p_now timestamptz,
                                         p_counted integer)
RETURNS integer LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT count(*)::integer + 1
              FROM (SELECT 1 FROM jobs AS a
                     WHERE a.state = 'queued' AND a.tenant_id = p_tenant_id
                       AND a.run_at <= p_now
                       AND (a.priority, a.run_at, a.id) < (p_priority, p_run_at, p_id)
                     LIMIT p_counted) AS ahead);
END;
$$
"""


def _job(place: int) -> str:
    return f"job_{place:09d}"


@dataclasses.dataclass
class Line:
    """One size's database, filled, and what was timed on it."""

    size: int
    dsn: str
    storage: PostgresStore
    fill_s: float
    times: list[list[float]] = dataclasses.field(default_factory=list)  # ms, per round
    old_head_ms: float = 0.0


async def fill(size: int) -> Line:
    """A migrated database holding `size` queued jobs of one tenant, vacuumed and analysed."""
    dsn = await pg.create("backlog")
    storage = postgres_store(dsn, pool_size=2)
    await storage.open()
    await storage.migrate()
    await storage.tenant_create(tenant_id=TENANT, name="backlog", webhook_secret="s")
    conn = await asyncpg.connect(dsn)
    try:
        started = time.perf_counter()
        await conn.execute(FILL, TENANT, size)
        fill_s = time.perf_counter() - started
        await conn.execute("VACUUM ANALYZE jobs")
        await conn.execute(OLD_COUNT)
    finally:
        await conn.close()
    return Line(size, dsn, storage, fill_s)


def _ids(size: int) -> list[str]:
    return [_job(p) for p in sorted({1, 2, min(50, size), min(101, size), size // 2, size})]


async def time_reads(line: Line, reads: int) -> None:
    """One round: `reads` status reads (ms) round-robin over the line's places."""
    ids = _ids(line.size)
    for job_id in ids * 10:  # warm-up: plans settle (generic after five), pages cached
        await line.storage.job_status(job_id=job_id, tenant_id=TENANT)
    times: list[float] = []
    for _ in range(reads // len(ids)):
        for job_id in ids:
            t0 = time.perf_counter()
            status = await line.storage.job_status(job_id=job_id, tenant_id=TENANT)
            times.append((time.perf_counter() - t0) * 1000)
            assert status is not None and status.queue_position is not None
    line.times.append(times)


def summary(line: Line) -> dict[str, Any]:
    rounds = [percentile(t, 0.99) or 0.0 for t in line.times]
    every = [ms for t in line.times for ms in t]
    return {
        "queued": line.size,
        "fill_s": round(line.fill_s, 1),
        "reads": len(every),
        "p50_ms": round(percentile(every, 0.50) or 0.0, 3),
        "p99_ms": round(percentile(every, 0.99) or 0.0, 3),
        "p99_rounds_ms": [round(r, 2) for r in rounds],
        "p99_median_round_ms": round(statistics.median(rounds), 3),
        "old_head_ms": round(line.old_head_ms, 3),
    }


async def _old_count_ms(dsn: str, *, reads: int) -> float:
    """p50 (ms) of 0029's count for the job at the head of the line (nobody ahead)."""
    conn = await asyncpg.connect(dsn)
    try:
        row = await conn.fetchrow("SELECT run_at FROM jobs WHERE id = $1", _job(1))
        assert row is not None
        query = await conn.prepare("SELECT bench_old_queue_position($1, 5, $2, $3, now(), 1000)")
        times = []
        for _ in range(reads):
            t0 = time.perf_counter()
            assert await query.fetchval(TENANT, row["run_at"], _job(1)) == 1
            times.append((time.perf_counter() - t0) * 1000)
        return percentile(times, 0.50) or 0.0
    finally:
        await conn.close()


def section(rows: list[dict[str, Any]], command: str, load: tuple[list[float], list[float]]) -> str:
    base = rows[0]["p99_ms"]
    date = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        TITLE,
        "",
        f"Measured on {date} with `{command}` (bench/backlog.py; on demand, not part of "
        "`python -m bench`), on the machine below, shared with other work. What is timed: "
        "`Storage.job_status` (the one statement of `GET /v1/jobs/{id}`: the job, its place in "
        "line, the pause covering it) for a queued job of a tenant with N queued jobs (one "
        "priority, all claimable, loaded by `INSERT ... SELECT generate_series` and `VACUUM "
        "ANALYZE`d), one read at a time from one asyncpg caller over loopback, round-robin over "
        "the jobs at places 1, 2, 50, 101, the middle and the end of the line; every size is "
        "filled first, then timed in turn in each round, so that the sizes share the same "
        "stretches of the machine's other work. No HTTP: the figures are the database read a "
        "status request makes, not a request's latency. *old count, head job* is migration "
        "0029's count (replaced by 0053) for the job at the head of the line, timed alone "
        "(p50): it walked every job behind it. Load average (1, 5, 15 min) "
        f"{load[0]} at the start and {load[1]} at the end, on 2 cores: the machine's other work "
        "sets the absolute figures and most of the p99, so compare the sizes within the table "
        "and round by round.",
        "",
        f"| queued | reads | status p50 ms | status p99 ms | p99 ÷ at {rows[0]['queued']:,} "
        "| p99 of each round ms | median round p99 ÷ at "
        f"{rows[0]['queued']:,} | old count, head job, ms | fill s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    base_round = rows[0]["p99_median_round_ms"]
    for row in rows:
        ratio = row["p99_ms"] / base if base else 0.0
        median = row["p99_median_round_ms"] / base_round if base_round else 0.0
        each = " / ".join(f"{r:.2f}" for r in row["p99_rounds_ms"])
        lines.append(
            f"| {row['queued']:,} | {row['reads']:,} | {row['p50_ms']:.3f} | "
            f"{row['p99_ms']:.3f} | {ratio:.2f}x | {each} | {median:.2f}x | "
            f"{row['old_head_ms']:.3f} | {row['fill_s']} |"
        )
    lines.append("")
    return "\n".join(lines)


def splice(doc: Path, text: str, title: str = TITLE) -> None:
    """Replace the section `title` in docs/benchmarks.md (or add it before `## Machine`)."""
    current = doc.read_text()
    if title in current:
        start = current.index(title)
        end = current.find("\n## ", start + len(title))
        current = current[:start] + text.rstrip() + "\n" + current[end:]
    else:
        at = current.index("## Machine")
        current = current[:at] + text.rstrip() + "\n\n" + current[at:]
    doc.write_text(current)


async def run(sizes: list[int], reads: int, rounds: int) -> list[dict[str, Any]]:
    """Every size filled first, then `rounds` rounds, each timing every size in turn, so that
    each size is sampled across the same stretches of the machine's other work."""
    lines: list[Line] = []
    try:
        for size in sizes:
            lines.append(await fill(size))
        for _ in range(rounds):
            for line in lines:
                await time_reads(line, reads)
        for line in lines:
            line.old_head_ms = await _old_count_ms(line.dsn, reads=50)
        rows = [summary(line) for line in lines]
    finally:
        for line in lines:
            await line.storage.close()
            await pg.drop(line.dsn)
    for row in rows:
        print(row, flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.backlog", description=__doc__)
    parser.add_argument("--sizes", default="1000,100000,1000000")
    parser.add_argument("--reads", type=int, default=3000, help="per size and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--docs", action="store_true", help="write bench/backlog.md")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    at_start = [round(x, 2) for x in os.getloadavg()]
    rows = asyncio.run(run(sizes, args.reads, args.rounds))
    at_end = [round(x, 2) for x in os.getloadavg()]
    command = "python -m bench.backlog --sizes " + ",".join(str(s) for s in sizes)
    if args.reads != 3000:
        command += f" --reads {args.reads}"
    if args.rounds != 3:
        command += f" --rounds {args.rounds}"
    text = section(rows, command, (at_start, at_end))
    print(text)
    if args.docs:
        SECTION.write_text(text)
        doc = Path(os.path.dirname(__file__)).parent / "docs" / "benchmarks.md"
        splice(doc, text)


if __name__ == "__main__":
    main()
