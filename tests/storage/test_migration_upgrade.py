"""Upgrading a database that holds jobs in every state, written by hand at migration 0021, to
the newest schema: every job reads back as it was, the event log and the outbox are untouched,
and the live jobs keep working where they stood (a lease taken before the upgrade heartbeats
and finishes after it, an expired lease is reaped, a requested cancel is still seen, queued
jobs are claimed under the tenant's cap counted from the jobs already running, terminal jobs
stay terminal). While 0021 is the newest migration this holds the current schema to the same;
a migration that reshapes `jobs` (e.g. a narrow queue table beside it) must pass it."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from jobgate.domain.job import Lease
from jobgate.domain.states import JobState
from jobgate.domain.verdicts import Finish
from jobgate.storage import migrations
from jobgate.storage.postgres.store import postgres_store
from jobgate.storage.protocol import Storage
from jobgate.storage.records import ClaimPolicy, TenantShare
from jobgate.storage.sqlite.store import sqlite_store
from tests.support.databases import PostgresTemplate, dsn_for

OLD_VERSION = 21  # the schema jobs are written at by hand
TENANT = "ten_upgrade"


@dataclass
class OldDatabase:
    """A store, and raw SQL on the same database for what the store cannot write at an old
    schema: `insert(table, row)` and `select(sql)` (rows as dicts)."""

    storage: Storage
    insert: Callable[[str, Mapping[str, Any]], Any]
    select: Callable[[str], Any]


def _old_migrations(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Make `migrate()` stop at OLD_VERSION until the returned function is called."""
    real = migrations.pending

    def up_to_old(package: str, applied: Any) -> list[migrations.Migration]:
        return [m for m in real(package, applied) if m.version <= OLD_VERSION]

    monkeypatch.setattr(migrations, "pending", up_to_old)
    return lambda: monkeypatch.setattr(migrations, "pending", real)


@pytest.fixture
async def old_database(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[OldDatabase, Callable[[], None]]]:
    newest = _old_migrations(monkeypatch)
    if backend == "sqlite":
        path = str(tmp_path / "old.db")
        storage: Storage = sqlite_store(path)
        await storage.open()
        await storage.migrate()
        raw = sqlite3.connect(path, isolation_level=None)
        raw.row_factory = sqlite3.Row
        types = {row["name"]: row["type"] for row in raw.execute("PRAGMA table_info(jobs)")}

        async def insert_sqlite(table: str, row: Mapping[str, Any]) -> None:
            values = {name: _sqlite_value(value) for name, value in row.items()}
            columns = ", ".join(values)
            marks = ", ".join(f":{name}" for name in values)
            raw.execute(f"INSERT INTO {table} ({columns}) VALUES ({marks})", values)

        async def select_sqlite(sql: str) -> list[dict[str, Any]]:
            return [dict(row) for row in raw.execute(sql).fetchall()]

        assert types, "no jobs table at the old schema"
        yield OldDatabase(storage, insert_sqlite, select_sqlite), newest
        raw.close()
        await storage.close()
        return

    name = f"jobgate_upgrade_{tmp_path.name[-12:].replace('-', '_').lower()}"
    await PostgresTemplate._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    await PostgresTemplate._admin(f'CREATE DATABASE "{name}"')
    dsn = dsn_for(name)
    storage = postgres_store(dsn, pool_size=2)
    await storage.open()
    await storage.migrate()
    conn = await asyncpg.connect(dsn)
    pg_types: dict[str, dict[str, str]] = {}

    async def insert_pg(table: str, row: Mapping[str, Any]) -> None:
        if table not in pg_types:
            found = await conn.fetch(
                "SELECT column_name, data_type FROM information_schema.columns"
                " WHERE table_name = $1",
                table,
            )
            pg_types[table] = {r["column_name"]: r["data_type"] for r in found}
        names = list(row)
        marks = ", ".join(
            f"${i}::text::{pg_types[table][name]}" for i, name in enumerate(names, start=1)
        )
        values = [_pg_text(row[name]) for name in names]
        await conn.execute(f"INSERT INTO {table} ({', '.join(names)}) VALUES ({marks})", *values)

    async def select_pg(sql: str) -> list[dict[str, Any]]:
        return [dict(r) for r in await conn.fetch(sql)]

    try:
        yield OldDatabase(storage, insert_pg, select_pg), newest
    finally:
        await conn.close()
        await storage.close()
        await PostgresTemplate._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _as_before(after: list[dict[str, Any]], before: list[dict[str, Any]]) -> bool:
    """The rows read back hold the rows of before, column for column (a later migration may add
    columns: PostgreSQL's history tables gained their partition key, job_created_at)."""
    return [
        {name: row.get(name) for name in old} for row, old in zip(after, before, strict=False)
    ] == [dict(old) for old in before] and len(after) == len(before)


def _sqlite_value(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, dict | list):
        return json.dumps(value)
    if isinstance(value, bool):
        return int(value)
    return value


def _pg_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict | list):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _job(job_id: str, state: str, now: datetime, **fields: Any) -> dict[str, Any]:
    """A job row as the old schema held it (the columns every state has, then `fields`)."""
    row: dict[str, Any] = {
        "id": job_id,
        "tenant_id": TENANT,
        "state": state,
        "api": "jobs",
        "provider": "sim",
        "endpoint": "/v1/chat/completions",
        "model": "sim-echo",
        "request": {"model": "sim-echo", "messages": [{"role": "user", "content": job_id}]},
        "metadata": {"name": job_id},
        "priority": 5,
        "attempt": 0,
        "max_attempts": 3,
        "run_count": 0,
        "lost_count": 0,
        "series": 0,
        "run_at": now - timedelta(minutes=10),
        "created_at": now - timedelta(minutes=10),
        "updated_at": now - timedelta(minutes=5),
        "event_seq": 1,
        "transition_actor": "api",
        "transition_reason": "submitted",
    }
    row.update(fields)
    return row


def _running(now: datetime, token: str, expires_in_s: float) -> dict[str, Any]:
    return {
        "attempt": 1,
        "run_count": 1,
        "started_at": now - timedelta(minutes=4),
        "lease_owner": "wrk_before_upgrade",
        "lease_token": token,
        "lease_expires_at": now + timedelta(seconds=expires_in_s),
        "phase": "awaiting_provider",
    }


def _every_state(now: datetime) -> list[dict[str, Any]]:
    done = {"completed_at": now - timedelta(minutes=1), "attempt": 1, "run_count": 1}
    return [
        _job("job_queued", "queued", now),
        _job("job_queued_urgent", "queued", now, priority=0, concurrency_key="user_1"),
        _job("job_queued_later", "queued", now, run_at=now + timedelta(hours=1)),
        _job("job_queued_deadline", "queued", now, expires_at=now + timedelta(hours=2)),
        _job(
            "job_queued_retry",
            "queued",
            now,
            attempt=1,
            run_count=1,
            error={"code": "rate_limited", "message": "slow down", "type": "rate_limit_error"},
        ),
        _job("job_running", "running", now, **_running(now, "tok_running", 600)),
        _job(
            "job_running_cancel",
            "running",
            now,
            cancel_requested_at=now - timedelta(seconds=30),
            **_running(now, "tok_cancel", 600),
        ),
        _job(
            "job_running_background",
            "running",
            now,
            provider_job_id="resp_upstream_1",
            reconcile_at=now + timedelta(seconds=20),
            creation_outcome="created",
            deadline_at=now + timedelta(hours=1),
            execution_timeout_s=3600.0,
            **_running(now, "tok_background", 600),
        ),
        _job("job_running_lost", "running", now, **_running(now, "tok_lost", -60)),
        _job(
            "job_succeeded",
            "succeeded",
            now,
            result={"id": "chatcmpl-1", "object": "chat.completion", "choices": []},
            usage={"input_tokens": 3, "output_tokens": 5},
            **done,
        ),
        _job(
            "job_failed",
            "failed",
            now,
            error={"code": "worker_lost", "message": "gone", "type": "job_error"},
            dead_lettered=True,
            **done,
        ),
        _job("job_cancelled", "cancelled", now, cancel_outcome="not_started", **done),
        _job(
            "job_expired",
            "expired",
            now,
            completed_at=now - timedelta(minutes=1),
            expires_at=now - timedelta(minutes=2),
        ),
    ]


RUNNING = ("job_running", "job_running_cancel", "job_running_background", "job_running_lost")
TERMINAL = ("job_succeeded", "job_failed", "job_cancelled", "job_expired")


def _by_id(rows: list[dict[str, Any]], key: str = "id") -> dict[Any, dict[str, Any]]:
    return {row[key]: row for row in rows}


async def test_an_upgrade_keeps_every_job_and_its_lease(
    old_database: tuple[OldDatabase, Callable[[], None]],
) -> None:
    old, to_newest = old_database
    storage = old.storage
    assert await storage.schema_version() == OLD_VERSION
    now = datetime.fromtimestamp(int(datetime.now(UTC).timestamp()), UTC)
    await storage.tenant_create(tenant_id=TENANT, name="upgrade", webhook_secret="whsec_up")
    rows = _every_state(now)
    for row in rows:
        await old.insert("jobs", row)
    jobs_before = _by_id(await old.select("SELECT * FROM jobs"))
    events_before = await old.select("SELECT * FROM job_events ORDER BY job_id, seq")
    outbox_before = await old.select("SELECT * FROM outbox ORDER BY id")
    assert set(jobs_before) == {row["id"] for row in rows}

    to_newest()
    applied = await storage.migrate()
    assert min(applied, default=OLD_VERSION + 1) == OLD_VERSION + 1

    # Every column of every job reads back as it was, through the same name.
    jobs_after = _by_id(await old.select("SELECT * FROM jobs"))
    assert set(jobs_after) == set(jobs_before)
    for job_id, before in jobs_before.items():
        after = {name: jobs_after[job_id].get(name) for name in before}
        assert after == before, job_id
    assert _as_before(
        await old.select("SELECT * FROM job_events ORDER BY job_id, seq"), events_before
    )
    # Each job's log reads as it was stored: a first event stored before 0028 is not read a
    # second time as one its row implies (job_event_log).
    for row in rows:
        stored = [e for e in events_before if e["job_id"] == row["id"]]
        logged = await storage.job_events(job_id=row["id"])
        assert [(e.seq, e.actor, e.reason) for e in logged] == [
            (e["seq"], e["actor"], e["reason"]) for e in stored
        ], row["id"]
    assert _as_before(await old.select("SELECT * FROM outbox ORDER BY id"), outbox_before)
    for row in rows:
        job = await storage.job_get(job_id=row["id"], tenant_id=TENANT)
        assert job is not None and job.state == JobState(row["state"]), row["id"]
        assert job.lease_token == row.get("lease_token"), row["id"]
        assert job.request == row["request"] and job.metadata == row["metadata"]

    # A lease taken before the upgrade is still held, and its cancel request still seen.
    leases = [
        Lease(job_id, token) for job_id, token in _tokens(rows, "job_running", "job_running_cancel")
    ]
    beats = {
        b.job_id: b.cancel_requested
        for b in await storage.job_heartbeat(leases=leases, lease_ttl_s=60)
    }
    assert beats == {"job_running": False, "job_running_cancel": True}

    # Queued jobs are claimed under the tenant's cap, counted from the jobs already running
    # (four, one of them lost): a cap of five leaves one slot.
    policy = ClaimPolicy(default=TenantShare(max_running=len(RUNNING) + 1))
    claimed = await storage.job_claim(
        worker_id="wrk_after", limit=10, lease_ttl_s=60, policy=policy
    )
    assert [job.id for job in claimed] == ["job_queued_urgent"]
    more = await storage.job_claim(worker_id="wrk_after", limit=10, lease_ttl_s=60)
    assert {job.id for job in more} == {"job_queued", "job_queued_deadline", "job_queued_retry"}
    assert all(job.state is JobState.RUNNING for job in [*claimed, *more])

    # The old lease finishes, fenced on its old token; a stale token writes nothing.
    (token,) = (t for job_id, t in _tokens(rows, "job_running"))
    done = await storage.job_finish_many(
        finishes=[
            Finish(
                lease=Lease("job_running", token),
                state=JobState.SUCCEEDED,
                reason="completed",
                result={"id": "chatcmpl-2", "object": "chat.completion", "choices": []},
                usage={"input_tokens": 1, "output_tokens": 1},
            ),
            Finish(lease=Lease("job_succeeded", "tok_stale"), state=JobState.FAILED, reason="late"),
        ]
    )
    assert done[0] is not None and done[0].state is JobState.SUCCEEDED and done[1] is None
    finished = await storage.job_get(job_id="job_running")
    assert finished is not None and finished.state is JobState.SUCCEEDED
    assert finished.lease_token is None and finished.completed_at is not None
    events = await storage.job_events(job_id="job_running")
    assert (events[-1].from_state, events[-1].to_state) == (JobState.RUNNING, JobState.SUCCEEDED)

    # The lease that ran out before the upgrade is reaped and queued again.
    reaped = await storage.job_reap_expired(limit=10, retry_delay=lambda attempt: 0.0)
    assert reaped.requeued == ["job_running_lost"]
    lost = await storage.job_get(job_id="job_running_lost")
    assert lost is not None and lost.state is JobState.QUEUED and lost.lost_count == 1

    # Terminal jobs stayed terminal and as they were.
    for job_id in TERMINAL:
        job = await storage.job_get(job_id=job_id)
        assert job is not None and job.state.terminal and job.lease_token is None


def _tokens(rows: list[dict[str, Any]], *job_ids: str) -> list[tuple[str, str]]:
    by_id = _by_id(rows)
    return [(job_id, by_id[job_id]["lease_token"]) for job_id in job_ids]
