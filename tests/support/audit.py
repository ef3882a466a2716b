"""Read back what happened to jobs, straight from the database, for fault tests and the soak
checker: each job's state, its applied terminal events, its claims (provider calls started),
its ledger rows and its outbox rows, and the violations of jobgate's promises.

Works on PostgreSQL (a DSN) and SQLite (a `sqlite:///path` URL); opens its own connections so
it never shares state with the processes under test.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

import asyncpg

from jobgate.domain import states

TERMINAL = tuple(str(state) for state in states.in_order(states.TERMINAL_STATES))


@dataclasses.dataclass(frozen=True, slots=True)
class JobFacts:
    id: str
    state: str
    attempt: int
    run_count: int
    lost_count: int
    dead_lettered: bool
    error_code: str | None
    terminal_events: int  # applied transitions into a terminal state
    claims: int  # applied queued -> running transitions: provider calls started
    ignored_events: int  # events recorded but not applied (late, duplicate, fenced off)
    ledger_rows: int
    outbox_rows: int
    outbox_duplicates: int  # (event_type, target, series) seen more than once
    # (from, to, actor, reason, applied) for each event, in order
    events: tuple[tuple[str | None, str, str, str | None, bool], ...]
    provider_job_id: str | None = None  # a background job's id at its provider

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL


@dataclasses.dataclass(slots=True)
class Verdict:
    """The soak checker's counts (Jepsen's queue checker, for jobs)."""

    accepted: int = 0
    lost: list[str] = dataclasses.field(default_factory=list)  # accepted, never terminal
    missing: list[str] = dataclasses.field(default_factory=list)  # accepted, no row at all
    double_completions: list[str] = dataclasses.field(default_factory=list)
    double_billing: list[str] = dataclasses.field(default_factory=list)
    duplicate_outbox: list[str] = dataclasses.field(default_factory=list)
    duplicate_provider_calls: int = 0  # extra claims: allowed (at-least-once calls), reported
    by_state: dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not (
            self.lost
            or self.missing
            or self.double_completions
            or self.double_billing
            or self.duplicate_outbox
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "accepted": self.accepted,
            "lost": len(self.lost) + len(self.missing),
            "double_completions": len(self.double_completions),
            "double_billing": len(self.double_billing),
            "duplicate_outbox_rows": len(self.duplicate_outbox),
            "duplicate_provider_calls": self.duplicate_provider_calls,
            "by_state": dict(sorted(self.by_state.items())),
        }


def check(facts: dict[str, JobFacts], accepted: Iterable[str]) -> Verdict:
    """Every accepted job must exist and be terminal, with exactly one terminal event, at most
    one ledger row (exactly one when it succeeded with usage), no duplicate outbox row."""
    verdict = Verdict()
    for job_id in accepted:
        verdict.accepted += 1
        job = facts.get(job_id)
        if job is None:
            verdict.missing.append(job_id)
            continue
        verdict.by_state[job.state] = verdict.by_state.get(job.state, 0) + 1
        if not job.terminal:
            verdict.lost.append(job_id)
        if job.terminal_events > 1 or (job.terminal and job.terminal_events != 1):
            verdict.double_completions.append(job_id)
        if job.ledger_rows > 1 or (job.state == "succeeded" and job.ledger_rows != 1):
            verdict.double_billing.append(job_id)
        if job.outbox_duplicates:
            verdict.duplicate_outbox.append(job_id)
        verdict.duplicate_provider_calls += max(0, job.claims - 1)
    return verdict


def job_facts(url: str, job_ids: Sequence[str] | None = None) -> dict[str, JobFacts]:
    """Facts for `job_ids` (every job when None), from a PostgreSQL DSN or a sqlite:/// URL."""
    if url.startswith("sqlite:"):
        return _sqlite_facts(url.split("sqlite://", 1)[1][1:] or url, job_ids)
    return asyncio.run(_postgres_facts(url, job_ids))


_JOBS = (
    "SELECT id, state, attempt, run_count, lost_count, dead_lettered, error, provider_job_id"
    " FROM jobs"
)
# PostgreSQL reads the whole log through its view (the first events its job rows imply,
# migration 0028); SQLite stores every event.
_EVENTS = "SELECT job_id, from_state, to_state, actor, reason, applied FROM job_event_log"
_SQLITE_EVENTS = "SELECT job_id, from_state, to_state, actor, reason, applied FROM job_events"
_LEDGER = "SELECT job_id, count(*) AS n FROM usage_ledger"
_OUTBOX = "SELECT job_id, event_type, target, series FROM outbox"


async def _postgres_facts(dsn: str, job_ids: Sequence[str] | None) -> dict[str, JobFacts]:
    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        if job_ids is None:
            jobs = await conn.fetch(_JOBS)
            events = await conn.fetch(_EVENTS + " ORDER BY job_id, seq")
            ledger = await conn.fetch(_LEDGER + " GROUP BY job_id")
            outbox = await conn.fetch(_OUTBOX)
        else:
            ids = list(job_ids)
            jobs = await conn.fetch(_JOBS + " WHERE id = ANY($1::text[])", ids)
            events = await conn.fetch(
                _EVENTS + " WHERE job_id = ANY($1::text[]) ORDER BY job_id, seq", ids
            )
            ledger = await conn.fetch(
                _LEDGER + " WHERE job_id = ANY($1::text[]) GROUP BY job_id", ids
            )
            outbox = await conn.fetch(_OUTBOX + " WHERE job_id = ANY($1::text[])", ids)
    finally:
        await conn.close()
    return _assemble(
        [dict(r) for r in jobs],
        [dict(r) for r in events],
        {r["job_id"]: r["n"] for r in ledger},
        [dict(r) for r in outbox],
    )


def _sqlite_facts(path: str, job_ids: Sequence[str] | None) -> dict[str, JobFacts]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    conn.row_factory = sqlite3.Row
    try:
        jobs = [dict(r) for r in conn.execute(_JOBS)]
        events = [dict(r) for r in conn.execute(_SQLITE_EVENTS + " ORDER BY job_id, seq")]
        ledger = {r[0]: r[1] for r in conn.execute(_LEDGER + " GROUP BY job_id")}
        outbox = [dict(r) for r in conn.execute(_OUTBOX)]
    finally:
        conn.close()
    if job_ids is not None:
        wanted = set(job_ids)
        jobs = [j for j in jobs if j["id"] in wanted]
    return _assemble(jobs, events, ledger, outbox)


def _assemble(
    jobs: list[dict[str, Any]],
    events: list[dict[str, Any]],
    ledger: dict[str, int],
    outbox: list[dict[str, Any]],
) -> dict[str, JobFacts]:
    by_job: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        by_job.setdefault(event["job_id"], []).append(event)
    outbox_keys: dict[str, list[tuple[Any, ...]]] = {}
    for row in outbox:
        outbox_keys.setdefault(row["job_id"], []).append(
            (row["event_type"], row["target"], row["series"])
        )
    facts = {}
    for job in jobs:
        error = job["error"]
        if isinstance(error, str | bytes):
            error = json.loads(error)
        log = by_job.get(job["id"], [])
        applied = [e for e in log if e["applied"]]
        keys = outbox_keys.get(job["id"], [])
        facts[job["id"]] = JobFacts(
            id=job["id"],
            state=job["state"],
            attempt=job["attempt"],
            run_count=job["run_count"],
            lost_count=job["lost_count"],
            dead_lettered=bool(job["dead_lettered"]),
            error_code=(error or {}).get("code"),
            terminal_events=sum(1 for e in applied if e["to_state"] in TERMINAL),
            claims=sum(
                1 for e in applied if e["to_state"] == "running" and e["from_state"] == "queued"
            ),
            ignored_events=sum(1 for e in log if not e["applied"]),
            ledger_rows=ledger.get(job["id"], 0),
            outbox_rows=len(keys),
            outbox_duplicates=len(keys) - len(set(keys)),
            events=tuple(
                (e["from_state"], e["to_state"], e["actor"], e["reason"], bool(e["applied"]))
                for e in log
            ),
            provider_job_id=job["provider_job_id"],
        )
    return facts
