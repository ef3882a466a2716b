"""SQLite's job trigger computes each transition's event type in SQL (migration 0008); it
must agree with jobgate.domain.events for every API, state and stored result status."""

from __future__ import annotations

import itertools
import sqlite3
from pathlib import Path

import orjson

from jobgate.domain import events
from jobgate.domain.states import JobState
from jobgate.storage.sqlite.store import register_functions, sqlite_store
from jobgate.testing import FakeClock
from tests.storage.helpers import make_tenant, new_job, submit_one
from tests.storage.webhook_helpers import make_endpoint

EVERY_EVENT_TYPE = sorted(
    {
        found
        for api, state, status in itertools.product(
            ("jobs", "responses"), list(JobState), (None, "incomplete")
        )
        if (found := events.event_type_for(api, state, status)) is not None
    }
)


async def test_trigger_event_type_agrees_with_the_domain(tmp_path: Path, clock: FakeClock) -> None:
    path = str(tmp_path / "jobgate.db")
    storage = sqlite_store(path, clock=clock)
    await storage.open()
    await storage.migrate()
    cases = list(
        itertools.product(
            ("jobs", "responses"), list(JobState), (None, "completed", "incomplete", "failed")
        )
    )
    try:
        tenant = await make_tenant(storage)
        # Both outbox branches: the tenant's endpoint and the job's own URL, each listing
        # every event type (the opt-in ones included).
        endpoint = await make_endpoint(storage, tenant, clock, event_types=EVERY_EVENT_TYPE)
        job_ids = []
        for api, _, _ in cases:
            job = new_job(
                tenant,
                api=api,
                webhook={"url": "https://j.example/h", "event_types": EVERY_EVENT_TYPE},
            )
            job_ids.append((await submit_one(storage, job=job, now=clock.now())).job.id)
    finally:
        await storage.close()
    conn = sqlite3.connect(path)
    try:
        register_functions(conn)  # jobgate_event_id(); the event type no longer needs Python
        with conn:
            for job_id, (_, state, status) in zip(job_ids, cases, strict=True):
                result = None if status is None else orjson.dumps({"status": status}).decode()
                conn.execute(
                    "UPDATE jobs SET state = ?, result = ?, event_seq = event_seq + 1,"
                    " transition_actor = 'test', transition_reason = 'test', updated_at = ?"
                    " WHERE id = ?",
                    (str(state), result, clock.now().timestamp(), job_id),
                )
        for job_id, (api, state, status) in zip(job_ids, cases, strict=True):
            found = sorted(
                conn.execute(
                    "SELECT target, event_type FROM outbox WHERE job_id = ?", (job_id,)
                ).fetchall()
            )
            expected = events.event_type_for(api, state, status)
            if state is JobState.QUEUED:
                expected = None  # no transition: queued to queued fires nothing
            targets = sorted([endpoint.id, "job"])
            wanted = [] if expected is None else [(target, expected) for target in targets]
            assert found == wanted, (api, state, status)
    finally:
        conn.close()


async def test_migrated_trigger_calls_no_python_event_type(tmp_path: Path) -> None:
    storage = sqlite_store(str(tmp_path / "jobgate.db"))
    await storage.open()
    await storage.migrate()
    await storage.close()
    conn = sqlite3.connect(str(tmp_path / "jobgate.db"))
    try:
        bodies = conn.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'jobs'"
        ).fetchall()
    finally:
        conn.close()
    assert bodies and not any("jobgate_event_type" in body for (body,) in bodies)


async def test_the_outbox_branch_runs_only_where_a_webhook_can_be_sent(tmp_path: Path) -> None:
    """Migration 0023: the outbox rows are written by a trigger whose WHEN asks for a webhook on
    the job or an enabled endpoint of its tenant, so a transition with neither (most of a
    drain) runs the event insert alone. What the outbox receives is unchanged
    (test_trigger_event_type_agrees_with_the_domain above, tests/storage/
    test_outbox_fanout.py)."""
    storage = sqlite_store(str(tmp_path / "jobgate.db"))
    await storage.open()
    await storage.migrate()
    await storage.close()
    conn = sqlite3.connect(str(tmp_path / "jobgate.db"))
    try:
        triggers = dict(
            conn.execute(
                "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'jobs'"
            ).fetchall()
        )
    finally:
        conn.close()
    writing = {name: sql for name, sql in triggers.items() if "INSERT INTO outbox" in sql}
    assert list(writing) == ["jobs_outbox_update"]
    when = " ".join(writing["jobs_outbox_update"].split("BEGIN")[0].split())
    assert "new.state IS NOT old.state" in when
    assert "new.webhook IS NOT NULL" in when
    assert "e.tenant_id = new.tenant_id AND e.disabled = 0" in when
    assert "INSERT INTO job_events" in triggers["jobs_log_update"]
