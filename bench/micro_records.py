"""`python -m bench.micro_records [--number N]`: the cost per call of what the worker and the
submit paths build for every job: a job row decoded (PostgreSQL's codec by name, SQLite's by
name and by position), a stored job answered from its insert (NewJob.queued), and the records
the worker builds per call (Lease, ProviderCall, ProviderResult, Finish). Best of 7 rounds of
N calls each, in ns per call.

On a busy machine the timings move by tens of per cent; instruction counts do not: run one
case under `valgrind --tool=callgrind python -m bench.micro_records --only CASE --number N`
for N and for 0, and divide the difference by N.
"""

from __future__ import annotations

import argparse
import dataclasses
import timeit
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import orjson

from jobgate.domain.job import Job, Lease, NewJob
from jobgate.domain.states import JobState
from jobgate.domain.verdicts import Finish
from jobgate.providers.base import ProviderCall, ProviderResult, Usage
from jobgate.storage import rows

T0 = datetime(2026, 12, 2, 15, 0, tzinfo=UTC)
REQUEST = {"model": "sim-echo", "messages": [{"role": "user", "content": "hi"}]}


def _claimed_row() -> dict[str, Any]:
    """A claimed job's row as PostgreSQL's codec hands it over (times and JSON decoded)."""
    row: dict[str, Any] = {f.name: None for f in dataclasses.fields(Job) if f.name != "damaged"}
    row.update(
        id="job_1",
        tenant_id="ten_1",
        state="running",
        api="jobs",
        provider="sim",
        endpoint="/v1/chat/completions",
        model="sim-echo",
        request=REQUEST,
        metadata={},
        priority=5,
        attempt=1,
        max_attempts=3,
        run_count=1,
        lost_count=0,
        run_at=T0,
        created_at=T0,
        updated_at=T0,
        started_at=T0,
        lease_owner="w",
        lease_token="tok",
        lease_expires_at=T0,
        phase="submitting",
        dead_lettered=False,
        event_seq=2,
        provider_generation=0,
    )
    return row


def _as_sqlite(row: dict[str, Any]) -> dict[str, Any]:
    return {
        name: value.timestamp()
        if isinstance(value, datetime)
        else orjson.dumps(value).decode()
        if isinstance(value, dict)
        else value
        for name, value in row.items()
    }


def cases() -> dict[str, Callable[[], object]]:
    postgres = rows.RowDecoder(time=lambda value: value, json=lambda value: value)
    sqlite = rows.RowDecoder(time=rows.unix_time, json=rows.tolerant_json(orjson.loads))
    pg_row, sqlite_row = _claimed_row(), _as_sqlite(_claimed_row())
    columns = tuple(sqlite_row)
    values = [tuple(sqlite_row.values())]
    new = NewJob("job_1", "ten_1", "sim", "/v1/chat/completions", "sim-echo", REQUEST, {})
    lease = Lease("job_1", "tok")
    usage = Usage(10, 20)
    return {
        "decode-postgres": lambda: postgres.job(pg_row),
        "decode-sqlite": lambda: sqlite.job(sqlite_row),
        "decode-sqlite-positional": lambda: sqlite.jobs_at(values, columns),
        "queued": lambda: new.queued(created_at=T0, run_at=T0, expires_at=None),
        "lease": lambda: Lease("job_1", "tok"),
        "provider-call": lambda: ProviderCall(
            "job_1", "ten_1", "/v1/chat/completions", REQUEST, "sim-echo", 1, 1, "job_1"
        ),
        "provider-result": lambda: ProviderResult({}, usage, "resp_1", "req_1"),
        "finish": lambda: Finish(
            lease=lease, state=JobState.SUCCEEDED, reason="completed", result={}, usage={}
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.micro_records")
    parser.add_argument("--number", type=int, default=100_000)
    parser.add_argument("--only", help="one case (for callgrind): run it N times, print nothing")
    args = parser.parse_args()
    table = cases()
    if args.only:
        call = table[args.only]
        for _ in range(args.number):
            call()
        return
    for name, call in table.items():
        best = min(timeit.repeat(call, number=args.number, repeat=7)) / args.number
        print(f"{name:26s} {best * 1e9:8.0f} ns")


if __name__ == "__main__":
    main()
