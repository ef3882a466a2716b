"""A model-based test: hypothesis drives submit / poll / cancel / claim / heartbeat /
finish (with current and stale lease tokens) / advance-clock / reap against each store, and
after every step checks the store against a small model and these invariants:

- monotonic: the applied events form one path through the transition table, and a terminal
  job never moves again;
- one terminal event per job;
- fencing: a write or a renewal with a stale token is refused and changes nothing;
- idempotency: one job per Idempotency-Key; a different body under a used key is refused.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    invariant,
    rule,
    run_state_machine_as_test,
)

from jobgate import errors
from jobgate.clock import SystemClock
from jobgate.domain import idempotency
from jobgate.domain.job import Lease
from jobgate.domain.states import TRANSITIONS, JobState
from jobgate.domain.verdicts import Finish
from jobgate.storage.postgres.store import postgres_store
from jobgate.storage.protocol import Storage
from jobgate.storage.records import IdempotencyClaim
from jobgate.storage.sqlite.store import sqlite_store
from jobgate.testing import FakeClock
from tests.conftest import copy_sqlite, run_sync
from tests.storage.helpers import finish_one, make_tenant, new_job, submit_one
from tests.support.databases import PostgresTemplate

T = TypeVar("T")
LEASE_TTL_S = 60.0
MAX_ATTEMPTS = 2
_examples = itertools.count(1)
BODIES = [{"model": "m", "n": 1}, {"model": "m", "n": 2}]


@dataclasses.dataclass
class ModelJob:
    id: str
    state: JobState = JobState.QUEUED
    token: str | None = None
    lease_expires_at: datetime | None = None
    run_at: datetime | None = None
    attempt: int = 0
    cancel_requested: bool = False
    stale_tokens: list[str] = dataclasses.field(default_factory=list)


def _machine(open_storage: Callable[[FakeClock], Coroutine[Any, Any, Storage]]) -> type:  # noqa: C901 -- the model: a branch per rule
    class JobLifecycle(RuleBasedStateMachine):
        jobs = Bundle("jobs")

        def __init__(self) -> None:
            super().__init__()
            self.loop = asyncio.new_event_loop()
            real = SystemClock().now()
            self.clock = FakeClock(datetime.fromtimestamp(int(real.timestamp()), UTC))
            self.example = next(_examples)
            self.provider = f"p{self.example}"  # claims only see this example's jobs
            self.storage = self.run(open_storage(self.clock))
            self.tenant = self.run(make_tenant(self.storage, f"t{self.example}"))
            self.model: dict[str, ModelJob] = {}
            self.keys: dict[str, tuple[str, str]] = {}  # key -> (body hash, job id)
            self.counter = itertools.count(1)
            self.dirty: set[str] = set()  # jobs a step may have changed: checked after it

        def run(self, coro: Coroutine[Any, Any, T]) -> T:
            return self.loop.run_until_complete(coro)

        def teardown(self) -> None:
            self.run(self.storage.close())
            self.loop.close()

        def now(self) -> datetime:
            return self.clock.now()

        def everything_dirty(self) -> None:
            self.dirty.update(self.model)

        # -- rules ------------------------------------------------------------------

        @rule(
            target=jobs,
            key=st.sampled_from([None, "k1", "k2"]),
            body=st.sampled_from(range(len(BODIES))),
        )
        def submit(self, key: str | None, body: int) -> str:
            request = BODIES[body]
            job_id = f"job_{self.example:05d}_{next(self.counter):04d}"
            claim = None
            body_hash = idempotency.body_hash(request)
            if key is not None:
                claim = IdempotencyClaim("POST /v1/jobs", key, body_hash, 202, 86_400)
            job = new_job(
                self.tenant, id=job_id, provider=self.provider, request=request,
                max_attempts=MAX_ATTEMPTS,
            )  # fmt: skip
            if key is not None and key in self.keys and self.keys[key][0] != body_hash:
                with pytest.raises(errors.IdempotencyKeyReused):
                    self.run(submit_one(self.storage, job=job, idempotency=claim, now=self.now()))
                return self.keys[key][1]
            outcome = self.run(submit_one(self.storage, job=job, idempotency=claim, now=self.now()))
            if key is not None and key in self.keys:
                assert outcome.replayed and outcome.job.id == self.keys[key][1]
                return outcome.job.id
            assert not outcome.replayed and outcome.job.id == job_id
            assert outcome.job.state is JobState.QUEUED
            self.model[job_id] = ModelJob(job_id, run_at=self.now())
            self.dirty.add(job_id)
            if key is not None:
                self.keys[key] = (body_hash, job_id)
            return job_id

        @rule(limit=st.integers(1, 3))
        def claim(self, limit: int) -> None:
            self.everything_dirty()
            claimable = sorted(
                (m for m in self.model.values() if m.state is JobState.QUEUED),
                key=lambda m: (m.run_at, m.id),
            )
            claimable = [m for m in claimable if m.run_at is not None and m.run_at <= self.now()]
            claimed = self.run(
                self.storage.job_claim(
                    worker_id="w", limit=limit, lease_ttl_s=LEASE_TTL_S,
                    providers=[self.provider], now=self.now(),
                )
            )  # fmt: skip
            assert sorted(j.id for j in claimed) == sorted(m.id for m in claimable[:limit])
            for job in claimed:
                entry = self.model[job.id]
                assert job.state is JobState.RUNNING and job.lease_token
                if entry.token is not None:
                    entry.stale_tokens.append(entry.token)
                entry.state = JobState.RUNNING
                entry.token = job.lease_token
                entry.attempt += 1
                entry.lease_expires_at = self.now() + timedelta(seconds=LEASE_TTL_S)
                assert job.attempt == entry.attempt

        def _lease(self, entry: ModelJob, stale: bool) -> Lease | None:
            if stale:
                token = entry.stale_tokens[-1] if entry.stale_tokens else "never-issued"
            else:
                if entry.token is None:
                    return None
                token = entry.token
            return Lease(entry.id, token)

        @rule(job_id=jobs, stale=st.booleans())
        def heartbeat(self, job_id: str, stale: bool) -> None:
            self.dirty.add(job_id)
            entry = self.model[job_id]
            lease = self._lease(entry, stale)
            if lease is None:
                return
            held = self.run(
                self.storage.job_heartbeat(leases=[lease], lease_ttl_s=LEASE_TTL_S, now=self.now())
            )
            valid = entry.state is JobState.RUNNING and lease.token == entry.token
            assert [h.job_id for h in held] == ([job_id] if valid else [])
            if valid:
                entry.lease_expires_at = self.now() + timedelta(seconds=LEASE_TTL_S)
                assert held[0].cancel_requested == entry.cancel_requested

        @rule(
            job_id=jobs,
            stale=st.booleans(),
            verdict=st.sampled_from([JobState.SUCCEEDED, JobState.FAILED, JobState.QUEUED]),
        )
        def finish(self, job_id: str, stale: bool, verdict: JobState) -> None:
            self.dirty.add(job_id)
            entry = self.model[job_id]
            lease = self._lease(entry, stale)
            if lease is None:
                return
            finish = Finish(
                lease=lease, state=verdict, reason="test", actor="w",
                result={"ok": True} if verdict is JobState.SUCCEEDED else None,
                usage={"input_tokens": 1, "output_tokens": 1}
                if verdict is JobState.SUCCEEDED else None,
            )  # fmt: skip
            valid = entry.state is JobState.RUNNING and lease.token == entry.token
            if not valid:
                before = self.run(self.storage.job_get(job_id=job_id))
                with pytest.raises(errors.LeaseLost):
                    self.run(finish_one(self.storage, finish=finish, now=self.now()))
                after = self.run(self.storage.job_get(job_id=job_id))
                assert before is not None and after is not None
                assert (after.state, after.event_seq, after.result) == (
                    before.state,
                    before.event_seq,
                    before.result,
                )  # fenced: nothing changed
                return
            job = self.run(finish_one(self.storage, finish=finish, now=self.now()))
            if verdict is JobState.QUEUED and entry.cancel_requested:
                verdict = JobState.CANCELLED  # a retry of a cancelled job is the cancellation
            assert job.state is verdict
            entry.state = verdict
            entry.stale_tokens.append(entry.token or "")
            entry.token = None
            entry.run_at = self.now()

        @rule(job_id=jobs)
        def cancel(self, job_id: str) -> None:
            self.dirty.add(job_id)
            entry = self.model[job_id]
            job = self.run(
                self.storage.job_cancel(
                    job_id=job_id, tenant_id=self.tenant.id, actor="api", now=self.now()
                )
            )
            assert job is not None
            if entry.state is JobState.QUEUED:
                entry.state = JobState.CANCELLED
            elif entry.state is JobState.RUNNING:
                entry.cancel_requested = True
            assert job.state is entry.state

        @rule(seconds=st.sampled_from([1, 30, 61, 200]))
        def advance_clock(self, seconds: int) -> None:
            self.clock.advance(seconds)

        @rule()
        def reap(self) -> None:
            self.everything_dirty()
            result = self.run(
                self.storage.job_reap_expired(limit=1000, retry_delay=lambda _: 0.0, now=self.now())
            )
            reaped = set(result.requeued) | set(result.failed) | set(result.cancelled)
            for entry in self.model.values():
                expired = (
                    entry.state is JobState.RUNNING
                    and entry.lease_expires_at is not None
                    and entry.lease_expires_at < self.now()
                )
                assert (entry.id in reaped) == expired, entry
                if not expired:
                    continue
                if entry.cancel_requested:
                    entry.state = JobState.CANCELLED
                elif entry.attempt >= MAX_ATTEMPTS:
                    entry.state = JobState.FAILED
                else:
                    entry.state = JobState.QUEUED
                    entry.run_at = self.now()
                entry.stale_tokens.append(entry.token or "")
                entry.token = None

        @rule(job_id=jobs)
        def poll(self, job_id: str) -> None:
            job = self.run(self.storage.job_get(job_id=job_id, tenant_id=self.tenant.id))
            assert job is not None and job.state is self.model[job_id].state

        # -- invariants -------------------------------------------------------------

        @invariant()
        def store_matches_model_and_log_is_monotonic(self) -> None:
            dirty, self.dirty = self.dirty, set()
            for entry in (self.model[job_id] for job_id in sorted(dirty)):
                job = self.run(self.storage.job_get(job_id=entry.id))
                assert job is not None and job.state is entry.state, (entry, job)
                events = self.run(self.storage.job_events(job_id=entry.id))
                seqs = [e.seq for e in events]
                assert seqs == sorted(set(seqs))
                applied = [e for e in events if e.applied]
                assert applied[0].from_state is None and applied[0].to_state is JobState.QUEUED
                for previous, event in itertools.pairwise(applied):
                    assert event.from_state is previous.to_state
                    assert not previous.to_state.terminal, "a terminal job moved"
                    if event.to_state is event.from_state:
                        # Not a transition: a fact about a live job (a cancel request).
                        assert event.reason == "cancel_requested"
                        continue
                    assert event.to_state in TRANSITIONS[previous.to_state]
                assert applied[-1].to_state is entry.state
                assert sum(1 for e in applied if e.to_state.terminal) <= 1

        @invariant()
        def one_job_per_key(self) -> None:
            assert len({job_id for _, job_id in self.keys.values()}) == len(self.keys)

    return JobLifecycle


@pytest.mark.timeout(240)
def test_job_lifecycle_state_machine(backend: str, tmp_path: Path, request: Any) -> None:
    files = itertools.count(1)
    dsn = None
    template: PostgresTemplate | None = None
    if backend == "postgres":
        template = request.getfixturevalue("pg_template")
        assert template is not None
        dsn = run_sync(template.clone())
    migrated: Path | None = request.getfixturevalue("sqlite_template") if dsn is None else None

    async def open_storage(clock: FakeClock) -> Storage:
        store: Storage
        if dsn is None:
            path = tmp_path / f"model{next(files)}.db"
            assert migrated is not None
            copy_sqlite(migrated, path)  # a new database each example, migrated once per process
            store = sqlite_store(str(path), clock=clock)
            await store.open()
            await store.migrate()
        else:
            store = postgres_store(dsn, pool_size=2)
            await store.open()
        return store

    try:
        run_state_machine_as_test(
            _machine(open_storage),
            settings=settings(
                max_examples=60 if backend == "sqlite" else 30,
                stateful_step_count=40,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow],
            ),
        )
    finally:
        if template is not None and dsn is not None:
            run_sync(template.drop_clone(dsn))
