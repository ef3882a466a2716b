"""A model-based race test: hypothesis interleaves submit, a worker's claim and
background create (non-idempotent creates), the provider finishing each job its own way,
cancel (also in the middle of a reconciler's check), reconciler sweeps, lease expiry and
re-claim, operator redrive, replies lost after commit, and the clocks moving, with the worker's
and the reconciler's host clocks skewed up to 70 minutes either way from the database's.

After every step it checks the invariants those races would break:
- the applied events form one path through the transition table, a terminal job never moves
  again except by an operator's redrive of a dead letter;
- after a cancel request, nothing starts the job again in that series (no claim), and no job
  waits in the queue with a cancel request;
- a redriven job starts clean: no cancel request, a start deadline in the future;
- no claim past the start deadline; no `deadline_exceeded` before the deadline by the
  database's clock;
- the provider is never asked to create a job twice in one series unless it was requeued by a
  verdict, and a job that ended `cancelled` at the provider had a cancel request.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from jobgate import errors
from jobgate.config import ProviderConfig, Settings
from jobgate.domain.job import Job
from jobgate.domain.states import TRANSITIONS, JobState
from jobgate.providers.background import ProviderJobRef, Snapshot, Status
from jobgate.providers.base import ProviderCall, ProviderResult, Usage
from jobgate.providers.registry import ProviderRegistry
from jobgate.providers.simulated import RESPONSES, SimProvider
from jobgate.roles.reconciler import Reconciler
from jobgate.roles.worker import Worker
from jobgate.storage.postgres.store import postgres_store
from jobgate.storage.protocol import Storage
from jobgate.storage.sqlite.store import sqlite_store
from jobgate.testing import FakeClock
from tests.conftest import copy_sqlite, run_sync
from tests.storage.helpers import make_tenant, new_job, submit_one
from tests.support.clocked import ClockedStorage
from tests.support.databases import PostgresTemplate
from tests.support.faults import FaultyStorage

T = TypeVar("T")
LEASE_TTL_S = 60.0
START = datetime(2030, 1, 1, 23, 0, tzinfo=UTC)
MAX_JOBS = 3  # few jobs, so that the rules keep meeting the same ones
SKEWS_S = [-4200.0, 0.0, 4200.0]  # host clocks up to 70 minutes off the database's
OUTCOMES = ["completed", "retryable", "rate_limited", "fatal"]
_examples = itertools.count(1)


class ModelProvider(SimProvider):
    """A background provider whose jobs finish when the test says, the way it says."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__("bg", clock=clock, background=True)
        self.idempotent_creates = False
        self.status: dict[str, str] = {}  # provider job id -> status
        self.outcome: dict[str, str] = {}  # provider job id -> how it ends when told
        self.by_job: dict[str, list[str]] = {}  # job id -> its provider jobs, in order
        self.during_check: Callable[[], Coroutine[Any, Any, object]] | None = None
        self._ids = itertools.count(1)

    async def create(self, call: ProviderCall) -> Snapshot:
        provider_job_id = f"resp_{call.job_id}_{next(self._ids)}"
        self.status[provider_job_id] = Status.IN_PROGRESS
        self.by_job.setdefault(call.job_id, []).append(provider_job_id)
        return Snapshot(provider_job_id, Status.IN_PROGRESS, {})

    def finish(self, provider_job_id: str, outcome: str) -> None:
        if self.status.get(provider_job_id) == Status.IN_PROGRESS:
            self.status[provider_job_id] = (
                Status.COMPLETED if outcome == "completed" else Status.FAILED
            )
            self.outcome[provider_job_id] = outcome

    def _snapshot(self, provider_job_id: str) -> Snapshot:
        status = self.status[provider_job_id]
        if status == Status.COMPLETED:
            result = ProviderResult(body={"ok": True}, usage=Usage(1, 1))
            return Snapshot(provider_job_id, status, {}, result=result)
        if status == Status.FAILED:
            outcome = self.outcome[provider_job_id]
            error: errors.ProviderError = {
                "retryable": errors.ProviderRetryable("boom", status_code=502),
                "rate_limited": errors.ProviderRateLimited("slow", retry_after_s=0),
                "fatal": errors.ProviderFatal("bad", status_code=400),
            }[outcome]
            return Snapshot(provider_job_id, status, {}, error=error)
        return Snapshot(provider_job_id, status, {})

    async def retrieve(self, ref: ProviderJobRef) -> Snapshot:
        if self.during_check is not None:
            hook, self.during_check = self.during_check, None
            await hook()
        return self._snapshot(ref.provider_job_id)

    async def fetch_result(self, ref: ProviderJobRef, snapshot: Snapshot) -> ProviderResult:
        raise AssertionError("results come with the snapshot")

    async def cancel(self, ref: ProviderJobRef) -> Snapshot:
        if self.status[ref.provider_job_id] == Status.IN_PROGRESS:
            self.status[ref.provider_job_id] = Status.CANCELLED
        return self._snapshot(ref.provider_job_id)


def _machine(open_storage: Callable[[FakeClock], Coroutine[Any, Any, Storage]]) -> type:  # noqa: C901 -- the model: a branch per rule
    class Races(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.loop = asyncio.new_event_loop()
            self.db = FakeClock(START)  # a fixed start and seeded jitter: deterministic
            self.example = next(_examples)
            self.raw = self.run(open_storage(self.db))
            self.faulty = FaultyStorage(self.raw)
            self.storage: Any = ClockedStorage(self.faulty, self.db)
            self.tenant = self.run(make_tenant(self.raw, f"t{self.example}"))
            self.provider = ModelProvider(self.db)
            self.settings = Settings(
                lease_ttl_s=LEASE_TTL_S,
                heartbeat_interval_s=15,
                retry_base_s=0.01,
                retry_max_s=0.01,
                max_attempts=2,
                providers={
                    "bg": ProviderConfig(kind="sim", mode="background", reconcile_after_s=1)
                },
            )
            self.registry = ProviderRegistry(
                {"bg": self.provider},
                configs=self.settings.all_providers(),
                default="bg",
                clock=self.db,
            )
            self.jobs: list[str] = []
            self.counter = itertools.count(1)
            self.worker_clock = FakeClock(self.db.now())
            self.reconciler_clock = FakeClock(self.db.now())
            self.worker: Worker | None = None
            self.reconciler: Reconciler | None = None

        def run(self, coro: Coroutine[Any, Any, T]) -> T:
            return self.loop.run_until_complete(coro)

        def teardown(self) -> None:
            self.run(self.raw.close())
            self.loop.close()

        async def get(self, job_id: str) -> Job:
            job = await self.raw.job_get(job_id=job_id)
            assert job is not None
            return job

        # -- rules ------------------------------------------------------------------------

        @initialize(worker_skew=st.sampled_from(SKEWS_S), reconciler_skew=st.sampled_from(SKEWS_S))
        def skew(self, worker_skew: float, reconciler_skew: float) -> None:
            self.worker_clock = FakeClock(self.db.now() + timedelta(seconds=worker_skew))
            self.reconciler_clock = FakeClock(self.db.now() + timedelta(seconds=reconciler_skew))
            self.worker = Worker(
                storage=self.storage,
                providers=self.registry,
                settings=self.settings,
                clock=self.worker_clock,
                worker_id=f"w{self.example}",
                rng=random.Random(1),
            )
            self.reconciler = Reconciler(
                storage=self.storage,
                providers=self.registry,
                settings=self.settings,
                clock=self.reconciler_clock,
                rng=random.Random(2),
            )

        @precondition(lambda self: len(self.jobs) < MAX_JOBS)
        @rule(
            start_timeout_s=st.sampled_from([None, 40.0, 400.0]),
            execution_timeout_s=st.sampled_from([None, 100.0, 3600.0]),
        )
        def submit(self, start_timeout_s: float | None, execution_timeout_s: float | None) -> None:
            job = new_job(
                self.tenant,
                id=f"job_{self.example:04d}_{next(self.counter):03d}",
                provider="bg",
                endpoint=RESPONSES,
                request={"model": "m", "input": "hi"},
                start_timeout_s=start_timeout_s,
                execution_timeout_s=execution_timeout_s,
            )
            self.run(submit_one(self.storage, job=job))
            self.jobs.append(job.id)

        @rule(lose_accept_reply=st.booleans(), lose_verdict_reply=st.booleans())
        def work(self, lose_accept_reply: bool, lose_verdict_reply: bool) -> None:
            assert self.worker is not None
            if lose_accept_reply:
                self.faulty.lose_reply("job_background_accept")
            if lose_verdict_reply:
                self.faulty.lose_reply("job_finish_many")
            starts = {job_id: self.run(self.get(job_id)).expires_at for job_id in self.jobs}
            before = {job_id: self.run(self.get(job_id)).event_seq for job_id in self.jobs}
            self.run(self.worker.run_once(limit=2))
            self.faulty._armed.clear()
            for job_id, seq in before.items():
                events = self.run(self.raw.job_events(job_id=job_id, after_seq=seq))
                if any(e.applied and e.to_state is JobState.RUNNING for e in events):
                    expires_at = starts[job_id]
                    assert expires_at is None or expires_at > self.db.now(), (
                        "claimed past its start deadline",
                        job_id,
                    )

        @precondition(lambda self: self.provider.by_job)
        @rule(data=st.data(), outcome=st.sampled_from(OUTCOMES))
        def provider_finishes(self, data: st.DataObject, outcome: str) -> None:
            job_id = data.draw(st.sampled_from(sorted(self.provider.by_job)))
            for provider_job_id in self.provider.by_job.get(job_id, []):
                self.provider.finish(provider_job_id, outcome)

        @precondition(lambda self: self.jobs)
        @rule(data=st.data())
        def cancel(self, data: st.DataObject) -> None:
            job_id = data.draw(st.sampled_from(self.jobs))
            self.run(self.storage.job_cancel(job_id=job_id, tenant_id=self.tenant.id, actor="api"))

        @rule()
        def sweep(self) -> None:
            assert self.reconciler is not None
            self.run(self.reconciler.sweep_once())

        @precondition(lambda self: self.provider.by_job)
        @rule(data=st.data())
        def sweep_while_cancelling(self, data: st.DataObject) -> None:
            """The client cancels after the reconciler claimed the job, during its check."""
            assert self.reconciler is not None
            job_id = data.draw(st.sampled_from(sorted(self.provider.by_job)))

            async def cancel() -> None:
                await self.storage.job_cancel(job_id=job_id, tenant_id=self.tenant.id, actor="api")

            self.provider.during_check = cancel
            self.run(self.reconciler.sweep_once())
            self.provider.during_check = None

        @rule(seconds=st.sampled_from([1.0, 31.0, 61.0, 500.0]))
        def advance(self, seconds: float) -> None:
            for clock in (self.db, self.worker_clock, self.reconciler_clock):
                clock.advance(seconds)

        @rule()
        def reap(self) -> None:
            self.run(self.storage.job_reap_expired(limit=100, retry_delay=lambda _: 0.0))
            self.run(self.storage.job_expire_due(limit=100))

        @precondition(lambda self: self.jobs)
        @rule(data=st.data())
        def redrive(self, data: st.DataObject) -> None:
            job_id = data.draw(st.sampled_from(self.jobs))
            try:
                job = self.run(
                    self.storage.job_redrive(job_id=job_id, tenant_id=self.tenant.id, actor="op")
                )
            except errors.Conflict:
                return
            assert job is not None and job.state is JobState.QUEUED
            assert job.cancel_requested_at is None and job.cancel_outcome is None
            assert job.expires_at is None or job.expires_at > self.db.now()

        # -- invariants ---------------------------------------------------------------------

        @invariant()
        def monotonic_and_nothing_runs_after_a_cancel(self) -> None:
            for job_id in self.jobs:
                job = self.run(self.get(job_id))
                events = [e for e in self.run(self.raw.job_events(job_id=job_id)) if e.applied]
                assert events[0].to_state is JobState.QUEUED
                cancel_asked = False
                deadline_at = None
                for previous, event in itertools.pairwise(events):
                    assert event.from_state is previous.to_state, (job_id, event)
                    if event.reason == "redrive":
                        assert (previous.to_state, event.to_state) == (
                            JobState.FAILED,
                            JobState.QUEUED,
                        )
                        cancel_asked = False
                        continue
                    assert not previous.to_state.terminal, ("a terminal job moved", event)
                    if event.to_state is event.from_state:
                        assert event.reason == "cancel_requested"
                        cancel_asked = True
                        continue
                    assert event.to_state in TRANSITIONS[previous.to_state]
                    if event.to_state is JobState.RUNNING:
                        assert not cancel_asked, ("claimed again after a cancel", job_id)
                    if event.to_state is JobState.QUEUED:
                        assert not cancel_asked, ("requeued after a cancel", job_id)
                    if event.reason == "deadline_exceeded":
                        deadline_at = job.deadline_at
                        assert deadline_at is None or event.created_at >= deadline_at
                assert events[-1].to_state is job.state
                if job.state is JobState.QUEUED:
                    assert job.cancel_requested_at is None

        @invariant()
        def no_create_without_a_claim(self) -> None:
            for job_id, created in self.provider.by_job.items():
                events = self.run(self.raw.job_events(job_id=job_id))
                claims = sum(
                    1 for e in events if e.applied and e.to_state is JobState.RUNNING
                    and e.from_state is JobState.QUEUED
                )  # fmt: skip
                assert len(created) <= claims, (job_id, created)
                for provider_job_id in created:
                    if self.provider.status[provider_job_id] == Status.CANCELLED:
                        job = self.run(self.get(job_id))
                        assert job.cancel_requested_at is not None or (
                            job.error is not None and job.error["code"] == "deadline_exceeded"
                        ), ("cancelled at the provider without a cancel request", job)

    return Races


@pytest.mark.timeout(120)
def test_cancel_settle_redrive_reclaim_with_skewed_clocks(
    backend: str, tmp_path: Path, request: Any
) -> None:
    files = itertools.count(1)
    template: PostgresTemplate | None = None
    if backend == "postgres":
        template = request.getfixturevalue("pg_template")
    migrated: Path | None = request.getfixturevalue("sqlite_template") if template is None else None
    clones: list[str] = []

    async def open_storage(clock: FakeClock) -> Storage:
        store: Storage
        if template is None:
            path = tmp_path / f"races{next(files)}.db"
            assert migrated is not None
            copy_sqlite(migrated, path)  # a new database each example, migrated once per process
            store = sqlite_store(str(path), clock=clock)
            await store.open()
            await store.migrate()
            return store
        dsn = await template.clone()
        clones.append(dsn)
        store = postgres_store(dsn, pool_size=2)
        await store.open()
        return store

    try:
        run_state_machine_as_test(
            _machine(open_storage),
            settings=settings(
                max_examples=60 if backend == "sqlite" else 15,
                stateful_step_count=40,
                deadline=None,
                derandomize=True,
                suppress_health_check=[HealthCheck.too_slow],
            ),
        )
    finally:
        if template is not None:
            for dsn in clones:
                run_sync(template.drop_clone(dsn))
