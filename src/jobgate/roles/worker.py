"""The worker: claims jobs under leases, calls providers outside any transaction, renews its
leases by heartbeat, and writes each verdict fenced on the lease it was claimed with.

A worker whose lease was reclaimed (or that cannot renew it before it runs out) stops the call
and drops the result: whoever holds the lease now owns the job. Verdicts of concurrently
finishing jobs are written together in one statement (group commit).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import dataclasses
import functools
import logging
import math
import os
import random
import secrets
import socket
from collections.abc import Callable, Coroutine
from typing import Any

from jobgate import errors, failpoints, metrics, tracing, wakeups
from jobgate.clock import Clock, SystemClock
from jobgate.config import Settings
from jobgate.domain import rate_limits as rate_limit_rules
from jobgate.domain import verdicts
from jobgate.domain.job import Job, Lease
from jobgate.domain.states import JobState
from jobgate.domain.verdicts import Finish, Poisoning
from jobgate.providers import background as provider_background
from jobgate.providers.base import Provider, ProviderCall, ProviderResult
from jobgate.providers.registry import ProviderRegistry
from jobgate.roles import eager, finish_group_commit, output_stream, worker_background
from jobgate.roles.call_verdicts import CallVerdicts, call_of
from jobgate.roles.finish_summary import FinishSummary
from jobgate.roles.intake import Intake
from jobgate.roles.lease_keeper import (
    ABORT_CANCEL,
    ABORT_LEASE_EXPIRING,
    ABORT_LEASE_LOST,
    ABORT_OUTPUT_NOT_STORED,
    ABORT_SHUTDOWN,
    InFlight,
    LeaseKeeper,
)
from jobgate.services import output_progress, rate_limits, readback, tenant_labels
from jobgate.services.breaker_sync import BreakerSync
from jobgate.services.limits import LimitsService
from jobgate.services.poison_log import log_poison
from jobgate.services.rate_limits import ClaimTarget, RateLimiter
from jobgate.storage import protocol
from jobgate.storage.records import ClaimPolicy, Finished
from jobgate.transports.base import Transport

log = logging.getLogger(__name__)

CLAIM_BATCH_MAX = finish_group_commit.MAX_BATCH  # jobs leased by one claim statement
# When work trickles in (each wake-up finds a job or two), wait this long after a wake-up so
# the next claim leases what arrived meanwhile in one statement, not one statement per job.
CLAIM_DEBOUNCE_S = 0.005

_PENDING: Any = object()  # a batch's job whose outcome is not known yet


@dataclasses.dataclass(slots=True, frozen=True)
class _Stopped:
    """A provider call stopped before its answer, and the verdict on it (None: none)."""

    finish: Finish | None


@dataclasses.dataclass(slots=True, eq=False)
class _Batch:
    """Jobs claimed together, run by `Worker._run`: begun in order (one task after another),
    their verdicts written together where they were known at once."""

    entries: list[InFlight]
    results: list[Finished | BaseException | None]  # each job's, once known (else _PENDING)
    left: int  # jobs whose outcome is not known yet
    started: asyncio.Future[None]  # every job has begun
    done: asyncio.Future[None]  # every job's outcome is known
    context: contextvars.Context  # the context of its start, copied for each of its tasks
    begun: int = 0  # jobs begun
    tasks: set[asyncio.Task[None]] = dataclasses.field(default_factory=set)


def default_worker_id() -> str:
    return f"worker:{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class Worker:
    def __init__(
        self,
        *,
        storage: protocol.WorkerStorage,
        providers: ProviderRegistry,
        settings: Settings,
        clock: Clock | None = None,
        worker_id: str | None = None,
        concurrency: int | None = None,
        provider_names: list[str] | None = None,
        rng: random.Random | None = None,
        limits: LimitsService | None = None,
        transport: Transport | None = None,
        on_claimed: Callable[[], None] | None = None,
    ) -> None:
        self.worker_id = worker_id or default_worker_id()
        # A broker transport (JOBGATE_TRANSPORT): jobs come from its messages, claimed by id.
        self._intake = (
            None
            if transport is None
            else Intake(
                storage=storage,
                transport=transport,
                settings=settings,
                clock=clock or SystemClock(),
                worker_id=self.worker_id,
                on_claimed=on_claimed,
            )
        )
        self._receive_waited = False  # the last claim blocked on the broker (no extra wait)
        self._storage = storage
        self._tenant_labels = tenant_labels.TenantLabels(storage)
        self._providers = providers
        self._settings = settings
        self._clock = clock or SystemClock()
        self.concurrency = concurrency or settings.worker_concurrency
        self._provider_names = provider_names
        self._limits = limits
        self._rate_limits = RateLimiter(storage=storage, configs=providers.configs())
        self._config_version = providers.version  # a reloaded configuration bumps it
        # Each (provider, api, endpoint)'s provider and background mode (`_provider_for`),
        # for the configuration version `_providers_seen`.
        self._targets: dict[
            tuple[str, str, str], tuple[Provider, provider_background.BackgroundProvider | None]
        ] = {}
        self._providers_seen = providers.version
        self._breakers = BreakerSync(
            storage=storage, gates=providers.gates, clock=self._clock, owner=self.worker_id
        )
        self._inflight: dict[str, InFlight] = {}
        self._writing = 0  # entries whose verdict is with the finish batcher (slot freed)
        self._summary = FinishSummary(clock=self._clock, worker_id=self.worker_id)
        # Provider call durations by (provider, outcome), observed when the verdicts are
        # handed on (`_observe_calls`), together.
        self._call_times: dict[tuple[str, str], list[float]] = {}
        self._tracing = False  # spans are recorded (tracing.recording, asked per batch)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._batcher = finish_group_commit.FinishGroupCommit(storage)
        self._verdicts = CallVerdicts(
            providers=providers, settings=settings, actor=self.worker_id, rng=rng
        )
        # Background mode (providers that run the job on their side): create, record, let go.
        self._background = worker_background.BackgroundStarter(
            storage=storage,
            providers=providers,
            settings=settings,
            clock=self._clock,
            actor=self.worker_id,
            verdicts=self._verdicts,
        )
        self._wake = wakeups.Wakeup()
        self._holding = asyncio.Lock()  # one provider rate limit held at a time (_hold)
        self._stopping = False
        self._leases = LeaseKeeper(
            storage=storage,
            settings=settings,
            clock=self._clock,
            worker_id=self.worker_id,
            inflight=self._inflight,
            intake=self._intake,
        )

    @property
    def inflight(self) -> int:
        return len(self._inflight)

    @property
    def busy(self) -> int:
        """Slots taken: jobs in flight whose verdict has not yet reached the finish batcher.
        A job whose verdict waits for the group commit keeps its lease (and its heartbeat)
        but no longer its slot."""
        return len(self._inflight) - self._writing

    def held_leases(self) -> list[Lease]:
        return [entry.lease for entry in self._inflight.values()]

    # -- one pass, for tests and for the loop ----------------------------------------------

    async def claim(self, limit: int | None = None) -> list[Job]:
        """Lease up to `limit` jobs (at most the free slots) and register them as in flight."""
        free = self.concurrency - self.busy
        # Thousands of free slots are filled by several claims of a bounded size (the claim
        # loop goes on while the queue yields), not one statement leasing them all.
        count = min(free, CLAIM_BATCH_MAX if limit is None else limit)
        if count <= 0 or self._stopping:
            return []
        policy = None if self._limits is None else await self._limits.claim_policy()
        # Per-provider backpressure: providers whose breaker is open or whose concurrency cap
        # is full are left out of the claim (their jobs wait in the queue); in the common case
        # the plan is one claim exactly as before.
        gates = self._providers.gates
        if self._config_version != self._providers.version:  # limits reloaded
            self._config_version = self._providers.version
            self._rate_limits.reconfigure(self._providers.configs())
        await self._breakers.sync()  # breakers other processes opened (cached up to 1 s)
        jobs: list[Job] = []
        # When each job's claim was sent (monotonic): its lease runs from then. A claim by id
        # follows a receive that may wait seconds for the broker; counted from before that
        # wait, its leases looked about to expire at once and their calls were stopped.
        claim_sent: dict[str, float] = {}
        limited = self._rate_limits.limited
        self._rate_limits.wait_s = 0.0
        with tracing.span("jobgate.claim", worker_id=self.worker_id) as claim_span:
            plan = gates.claim_plan(self._provider_names, count)
            intake = self._intake
            self._receive_waited = False
            if intake is not None and not intake.broker_down:
                # By id from the broker's messages; a provider held back by its gate is left
                # out of the claim (its messages are deferred, then published again). The
                # rate-limited providers are not published (Relay.skip_providers): they are
                # claimed from the table below, one request taken from their buckets first;
                # a stray message for one (published before a restart) is deferred here.
                every = self._providers.names()
                wanted = {n for providers, _ in plan for n in every if providers is None} | {
                    n for providers, _ in plan for n in providers or ()
                }
                unfiltered = any(providers is None for providers, _ in plan)
                allowed = None if unfiltered and not limited else sorted(wanted - limited)
                if allowed != []:
                    jobs = await intake.claim(count=count, providers=allowed, policy=policy)
                    claim_sent = dict.fromkeys((job.id for job in jobs), intake.claim_sent_at)
                    self._receive_waited = not intake.broker_down
                plan = [
                    (
                        [n for n in (every if providers is None else providers) if n in limited],
                        quota,
                    )
                    for providers, quota in plan
                ]
                plan = [(providers, quota) for providers, quota in plan if providers]
            elif intake is not None and self._settings.transport_fallback == "fail":
                plan = []  # the broker is down and claims wait for it (docs/transports.md)
            planned_at = self._clock.monotonic()
            try:
                await self._claim_planned(plan, jobs, count=count, policy=policy)
            except errors.StorageError as exc:
                if not jobs:
                    raise
                # Leased already (by id from the broker's messages, or by an earlier claim of
                # this pass): they must reach the caller. Dropped here, they would run nowhere
                # until the reaper took their leases back, their messages held by nobody.
                log.warning(
                    "claim failed: %s",
                    type(exc).__name__,
                    extra={"worker_id": self.worker_id, "count": len(jobs)},
                )
            claim_span.set_attribute("jobgate.claimed", len(jobs))
        if jobs:
            self._leases.claimed(min(claim_sent.get(job.id, planned_at) for job in jobs))
        for job in jobs:
            assert job.lease_token is not None
            lease = Lease(job.id, job.lease_token)
            self._inflight[job.id] = InFlight(job, lease, claim_sent.get(job.id, planned_at))
            gates.started(job.provider, job.id)
        waits: dict[str, list[float]] = {}  # tenant id: its jobs' waits, both times the
        for job in jobs:  # database's (when the job became claimable, and the claim)
            waits.setdefault(job.tenant_id, []).append(
                max(0.0, (job.updated_at - job.run_at).total_seconds())
            )
        for tenant_id, waited in waits.items():  # once held: a label lookup must not lose a lease
            label = await self._tenant_labels.label(tenant_id)
            metrics.observe_all(metrics.QUEUE_WAIT_SECONDS.labels(label), waited)
        return jobs

    async def _claim_planned(
        self,
        plan: list[tuple[list[str] | None, int]],
        jobs: list[Job],
        *,
        count: int,
        policy: ClaimPolicy | None,
    ) -> None:
        """Claim from the job table per `plan`, adding to `jobs` (up to `count` in all) as
        each claim answers: what was leased before an error stays there."""
        limited = self._rate_limits.limited
        for providers, quota in plan:
            if limited:
                # Rate-limited providers are claimed apart, one request at a time.
                names = self._providers.names() if providers is None else providers
                for name in (n for n in names if n in limited):
                    for target in self._rate_limits.targets(name):
                        left = min(quota, count - len(jobs))
                        jobs += await self._claim_limited(target, left, policy)
                providers = [n for n in names if n not in limited]
            quota = min(quota, count - len(jobs))
            if quota > 0 and providers != []:
                jobs += await self._storage.job_claim(
                    worker_id=self.worker_id,
                    limit=quota,
                    lease_ttl_s=self._settings.lease_ttl_s,
                    providers=providers,
                    policy=policy,
                )

    async def _claim_limited(
        self, target: ClaimTarget, limit: int, policy: ClaimPolicy | None
    ) -> list[Job]:
        """Claim for a rate-limited provider (or model): one job after one request was taken
        from its buckets, none while they have no room (the jobs stay queued, unleased)."""
        if limit <= 0:
            return []
        taken_at = await self._rate_limits.take(target) if target.buckets else None
        if target.buckets and taken_at is None:
            return []
        jobs = await self._storage.job_claim(
            worker_id=self.worker_id,
            limit=1 if target.buckets else limit,
            lease_ttl_s=self._settings.lease_ttl_s,
            providers=[target.provider],
            policy=policy,
            models=target.models,
            skip_models=target.skip_models,
        )
        if not target.buckets:
            return jobs
        if not jobs:
            assert taken_at is not None  # buckets were taken from
            await self._rate_limits.unused(target, taken_at)
            return []
        await self._rate_limits.started(target, jobs)
        return jobs

    async def run_once(self, *, limit: int | None = None) -> list[Job | None]:
        """Claim a batch and run every claimed job to its written verdict (for tests and
        tools). The answer holds each job as read back once its verdict is written, or None
        where the lease was lost and the result dropped."""
        written = await self.run_claimed(await self.claim(limit))
        return list(
            await asyncio.gather(
                *(self._read_back(done) for done in written),
            )
        )

    async def run_claimed(self, jobs: list[Job]) -> list[Finished | None]:
        """Run claimed jobs to their written verdicts, as the loop does (`_start`). The answer
        holds, in order, what was written for each job (None: the lease was lost); a job
        whose handling raised raises here. Cancelled, it cancels the jobs' tasks."""
        batch = self._start(jobs)
        try:
            await asyncio.shield(batch.done)
        except BaseException:
            for task in list(batch.tasks):
                task.cancel()
            raise
        for outcome in batch.results:
            if isinstance(outcome, BaseException):
                raise outcome
        return batch.results  # type: ignore[return-value]  # no exception among them

    async def execute(self, job: Job) -> Finished | None:
        """Run one claimed job: call its provider, then write the verdict under its lease.
        The answer is what was written, or None where the lease was lost."""
        [done] = await self.run_claimed([job])
        return done

    async def _read_back(self, done: Finished | None) -> Job | None:
        return None if done is None else await self._storage.job_get(job_id=done.job_id)

    def _release(self, entry: InFlight, *, wake: bool = True) -> None:
        """Let go of a job whose verdict is written (or whose lease is gone), and wake the
        claim loop (unless `wake` is False: the caller wakes it once for many)."""
        job = entry.job
        # Only our own entry: once our verdict requeued the job, this worker may have claimed
        # it again already, and that new lease must keep its heartbeat.
        self._rate_limits.forget(job.id)  # an estimate not settled stands as charged
        if entry.writing:
            self._writing -= 1
        if self._inflight.get(job.id) is entry:
            del self._inflight[job.id]
            self._providers.gates.finished(job.provider, job.id)
        if wake:
            self._wake.set()
        if self._intake is not None:  # after the verdict committed (or the lease is gone)
            self._intake.finished(entry.lease)

    # -- running claimed jobs --------------------------------------------------------------

    def _start(self, jobs: list[Job]) -> _Batch:
        """Start running claimed jobs (`_run`); the batch tells when each call has begun and
        when every verdict is written."""
        loop = asyncio.get_running_loop()
        self._tracing = tracing.recording()  # asked once per batch
        batch = _Batch(
            entries=[self._inflight[job.id] for job in jobs],
            results=[_PENDING] * len(jobs),
            left=len(jobs),
            started=loop.create_future(),
            done=loop.create_future(),
            context=contextvars.copy_context(),
        )
        if jobs:
            self._run_from(batch, 0, [])
        else:
            batch.started.set_result(None)
            batch.done.set_result(None)
        return batch

    def _run_from(self, batch: _Batch, index: int, answered: list[tuple[int, Finish]]) -> None:
        """Run the batch's jobs from `index` on in a new task (`_run`), in a fresh copy of the
        context the batch was started in."""
        task = asyncio.create_task(
            self._run(batch, index, answered),
            name=f"jobs from {batch.entries[index].job.id}"
            if index < len(batch.entries)
            else "verdicts",
            context=batch.context.copy(),
        )
        for tasks in (self._tasks, batch.tasks):
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        task.add_done_callback(functools.partial(self._run_ended, batch, index, answered))

    async def _run(self, batch: _Batch, index: int, answered: list[tuple[int, Finish]]) -> None:
        """Begin the batch's jobs from `index` on, one after the other, in this task. Each
        job's verdict coroutine (`_verdict`: the call and what follows it) takes its first step
        here: one that finishes without waiting (its call answered at once) adds its verdict
        to `answered`, written together once every job has begun; the first that waits keeps
        this task (a call's cancellation, deadline and context belong to the task it began
        in), and the jobs after it go on in a new task."""
        entries = batch.entries
        task = asyncio.current_task()
        assert task is not None
        i = index
        try:
            while i < len(entries):
                batch.begun = i + 1
                entries[i].task = task  # the job's task from now on, if it waits
                verdict = self._verdict(entries[i])
                try:
                    waiting = verdict.send(None)
                except StopIteration as stop:
                    outcome = stop.value
                    entry = entries[i]
                    if isinstance(outcome, Finish) and not entry.writing:  # `_answered`, inline
                        answered.append((i, outcome))
                        entry.writing = True
                        self._writing += 1
                    else:
                        self._answered(batch, i, outcome, answered)
                except Exception as exc:
                    self._failed(batch, i, exc)
                else:
                    break
                i += 1
        except BaseException as exc:  # not one job's error: the worker itself is stopping
            self._abandon(batch, i, answered, exc)
            raise
        if i < len(entries):  # job i waits: this task is its own from now on
            if i + 1 < len(entries) or answered:
                self._run_from(batch, i + 1, answered)
            elif not batch.started.done():
                batch.started.set_result(None)
            task.set_name(f"job {entries[i].job.id}")
            await self._finish_waiting(batch, i, verdict, waiting)
            return
        if not batch.started.done():
            batch.started.set_result(None)
        await self._write_answered(batch, answered)

    def _run_ended(
        self,
        batch: _Batch,
        index: int,
        answered: list[tuple[int, Finish]],
        task: asyncio.Task[None],
    ) -> None:
        """A task of `_run` cancelled before its first step began nothing: its jobs (and the
        verdicts handed to it) are let go."""
        if task.cancelled() and batch.begun <= index:
            self._abandon(batch, index, answered, asyncio.CancelledError())

    def _abandon(
        self,
        batch: _Batch,
        index: int,
        answered: list[tuple[int, Finish]],
        exc: BaseException,
    ) -> None:
        """Let go of the batch's jobs from `index` on and of `answered`, unwritten."""
        for i in [i for i, _ in answered] + list(range(index, len(batch.entries))):
            if batch.results[i] is _PENDING:
                self._failed(batch, i, exc)
        if not batch.started.done():
            batch.started.set_result(None)

    async def _finish_waiting(
        self,
        batch: _Batch,
        index: int,
        verdict: Coroutine[Any, Any, Finish | Finished | None],
        waiting: Any,
    ) -> None:
        """The rest of a job whose verdict coroutine waits (on `waiting`): awaited in the
        task that began it, then its verdict written."""
        try:
            outcome = await eager.Resumed(verdict, waiting)
        except Exception as exc:
            self._failed(batch, index, exc)
            return
        except BaseException as exc:
            self._failed(batch, index, exc)
            raise
        answered: list[tuple[int, Finish]] = []
        self._answered(batch, index, outcome, answered)
        await self._write_answered(batch, answered)

    def _answered(
        self,
        batch: _Batch,
        index: int,
        outcome: Finish | Finished | None,
        answered: list[tuple[int, Finish]],
    ) -> None:
        """A job's verdict is known: a verdict to write joins `answered` (its slot free at
        once, its lease kept until the write lands); what was written already (background
        mode) or nothing (the lease is lost) is the job's result now."""
        entry = batch.entries[index]
        if isinstance(outcome, Finish):
            answered.append((index, outcome))
            if not entry.writing:  # the slot is free for the next claim while it commits
                entry.writing = True
                self._writing += 1
            return
        self._release(entry)
        self._settled(batch, index, outcome)

    def _failed(self, batch: _Batch, index: int, exc: BaseException) -> None:
        """A job whose handling raised: let go (its lease is the reaper's to take back)."""
        entry = batch.entries[index]
        if isinstance(exc, Exception):
            log.error(
                "job handling failed",
                exc_info=exc,
                extra={"job_id": entry.job.id, "worker_id": self.worker_id},
            )
        self._observe_calls()
        self._release(entry)
        self._settled(batch, index, exc)

    @staticmethod
    def _settled(batch: _Batch, index: int, outcome: Finished | BaseException | None) -> None:
        if batch.results[index] is not _PENDING:
            return
        batch.results[index] = outcome
        batch.left -= 1
        if batch.left == 0 and not batch.done.done():
            batch.done.set_result(None)

    async def _write_answered(self, batch: _Batch, answered: list[tuple[int, Finish]]) -> None:
        """Write the batch's verdicts `answered` together: queued with the finish batcher at
        once, retried together while the database is unavailable (each while its lease may
        hold), each accounted; then each job is let go."""
        if not answered:
            return
        entries = batch.entries
        self._wake.set()  # their slots are free
        counts: collections.Counter[tuple[str, str, str]] = collections.Counter()
        written: dict[int, Finished | BaseException | None] = {}
        try:
            todo = [index for index, _ in answered]
            finishes = dict(answered)
            unknown: set[int] = set()  # an earlier attempt may have committed
            delay_s = 0.05
            while todo:
                outcomes = await self._batcher.finish_many([finishes[i] for i in todo])
                again: list[int] = []
                for i, outcome in zip(todo, outcomes, strict=True):
                    entry, finish = entries[i], finishes[i]
                    if isinstance(outcome, errors.StorageUnavailable):
                        unknown.add(i)
                        if self._clock.monotonic() - entry.renewed_at < self._settings.lease_ttl_s:
                            again.append(i)
                            continue
                        self._gave_up(entry, finish)
                        written[i] = None
                    elif isinstance(outcome, Finished):  # nearly every verdict: no coroutine
                        written[i] = self._counted(entry, finish, outcome, counts)
                    else:
                        written[i] = await self._account(
                            entry, finish, outcome, i in unknown, counts
                        )
                todo = again
                if todo:
                    await self._clock.sleep(delay_s)
                    delay_s = min(delay_s * 2, 2.0)
        except BaseException as exc:
            for index, _ in answered:
                written.setdefault(index, exc)
            raise
        finally:
            self._observe_calls()
            self._summary.count(counts)
            self._let_go(batch, answered, written)

    def _let_go(
        self,
        batch: _Batch,
        answered: list[tuple[int, Finish]],
        written: dict[int, Finished | BaseException | None],
    ) -> None:
        """Release the jobs of `answered`, their outcomes `written` (`_settled`, at once)."""
        entries, results = batch.entries, batch.results
        for index, _ in answered:
            self._release(entries[index], wake=False)
            if results[index] is _PENDING:
                results[index] = written.get(index)
                batch.left -= 1
        if batch.left == 0 and not batch.done.done():
            batch.done.set_result(None)
        self._wake.set()  # once for the batch

    async def _verdict(self, entry: InFlight) -> Finish | Finished | None:
        """The job's call and the verdict on it, to be written; what was written for it
        already (background mode: the provider's job, recorded); or None: its lease is no
        longer this worker's, nothing is written. A job this worker cannot handle (its row
        damaged, or handling it raises) fails alone as `poison_job` instead of taking the
        worker down."""
        job = entry.job
        try:
            finish = self._poisoned(job) if job.damaged else await self._attempt(entry)
        except errors.StorageError:
            raise  # the database's trouble, not the job's
        except Exception as exc:
            finish = self._poisoned(job, exc)
        if finish is None:
            await self._record_dropped(entry, "lease_lost")
            return None
        if isinstance(finish, worker_background.Accepted):
            # Background mode: record the provider's id (fenced) and free the slot.
            accepted = await self._background.accept(job, entry.lease, finish)
            if accepted is None:
                return None
            return Finished(accepted.id, accepted.state, accepted.attempt)
        if job.provider in self._rate_limits.limited:  # its estimate corrected by its usage
            succeeded = finish.state is JobState.SUCCEEDED
            await self._rate_limits.settle(job, finish.usage, succeeded=succeeded)
        if finish.reason == "rate_limited":
            await self._hold_shared_limits(job, finish.retry_in_s)
        if job.model_route is None:
            return finish
        return await self._reroute(entry, finish)

    def _poisoned(self, job: Job, exc: Exception | None = None) -> Finish:
        """The `poison_job` verdict of a job whose row is damaged or whose handling raised."""
        detail = verdicts.poison_detail(job, exc)
        log_poison("worker", Poisoning(job.id, detail, exc))
        metrics.POISON_JOBS.labels("worker").inc()
        return verdicts.poison_verdict(job, detail, actor=self.worker_id)

    async def _attempt(self, entry: InFlight) -> Finish | worker_background.Accepted | None:
        job = entry.job
        try:
            provider, in_background = self._provider_for(job)
        except errors.UnknownProvider as exc:
            fatal = errors.ProviderFatal(exc.message, code="unknown_provider")
            return self._verdicts.failed(job, fatal)
        timeout_s = None if job.deadline_at is None else self._time_left_s(entry)
        if timeout_s is not None and timeout_s <= 0:
            return verdicts.deadline_exceeded(job, actor=self.worker_id)
        call = call_of(job, stall_timeout_s=self._settings.stall_timeout_s)
        failpoints.hit("before_provider_call", job.model)
        if in_background is not None:
            return await self._background.start(job, entry.lease, call, in_background)
        if entry.abort_reason is not None:  # stopped before the call began
            return self._verdicts.aborted(job, entry.abort_reason)
        if not self._tracing:
            return await self._call(entry, provider, call, timeout_s)
        with tracing.span(
            "jobgate.provider_call",
            job_id=job.id,
            provider=job.provider,
            endpoint=job.endpoint,
            attempt=job.attempt,
        ):
            return await self._call(entry, provider, call, timeout_s)

    def _provider_for(
        self, job: Job
    ) -> tuple[Provider, provider_background.BackgroundProvider | None]:
        """The job's provider, and the same as a background provider where it runs the job's
        endpoint in background mode: looked up once per provider, api and endpoint until the
        provider configuration is reloaded."""
        if self._providers_seen != self._providers.version:
            self._providers_seen = self._providers.version
            self._targets = {}
        key = (job.provider, job.api, job.endpoint)
        target = self._targets.get(key)
        if target is None:
            provider = self._providers.get(job.provider, api=job.api)
            in_background = provider_background.background_for(provider, job.endpoint)
            target = self._targets[key] = (provider, in_background)
        return target

    async def _call(
        self, entry: InFlight, provider: Provider, call: ProviderCall, timeout_s: float | None
    ) -> Finish | None:
        """The provider call and the verdict on it (`_judged`); a call stopped (by
        `InFlight.stop`, or past the job's deadline) gets the stop's verdict."""
        job = entry.job
        started = self._clock.monotonic()
        task = entry.task  # the task that began the job's verdict runs it to its end (`_run`)
        assert task is not None
        outcome: ProviderResult | BaseException
        deadline = None if timeout_s is None else asyncio.timeout(timeout_s)
        try:
            entry.calling = task  # stop() cancels this task, only while it is in the call
            try:
                if output_progress.wants_stream(job):  # live output: streamed into its log
                    answer = self._streamed(provider, call, entry)
                else:
                    answer = provider.call(call)
                if deadline is None:
                    outcome = await answer
                else:
                    async with deadline:
                        outcome = await answer
            finally:
                entry.calling = None
        except asyncio.CancelledError as exc:
            if task.cancelling() == 0:
                outcome = exc  # the adapter cancelled something of its own: a bug there
            elif entry.abort_reason is None or task.uncancel() > 0:
                raise  # not (only) ours: the worker itself is being cancelled
            else:
                return self._verdicts.aborted(job, entry.abort_reason)
        except TimeoutError as exc:
            if deadline is not None and deadline.expired():
                return verdicts.deadline_exceeded(job, actor=self.worker_id)
            outcome = exc  # the provider's own timeout: judged like any other error
        except Exception as exc:
            outcome = exc
        if entry.abort_reason is not None and task.cancelling():
            task.uncancel()  # the adapter swallowed our cancellation: its answer stands
        failpoints.hit("after_provider_response")
        return self._judged(entry, outcome, started)

    def _judged(
        self, entry: InFlight, outcome: ProviderResult | BaseException, started: float
    ) -> Finish | None:
        """The verdict on a call that ended with `outcome` (None: the lease is no longer this
        worker's), its duration gathered (`_observe_calls`)."""
        job = entry.job
        if entry.abort_reason in (ABORT_LEASE_LOST, ABORT_LEASE_EXPIRING):
            return None
        if entry.abort_reason == ABORT_OUTPUT_NOT_STORED:  # its answer would lack the output
            return self._verdicts.aborted(job, entry.abort_reason)
        verdict = self._verdicts.of_outcome(job, outcome)
        key = (
            job.provider,
            JobState.SUCCEEDED.value
            if verdict.state is JobState.SUCCEEDED
            else (verdict.error or {}).get("type", "error"),
        )
        elapsed_s = self._clock.monotonic() - started
        times = self._call_times.get(key)
        if times is None:
            self._call_times[key] = [elapsed_s]
        else:
            times.append(elapsed_s)
        return verdict

    def _observe_calls(self) -> None:
        """Observe the call durations gathered since the last time: one histogram update per
        provider and outcome, however many calls."""
        if self._call_times:
            gathered, self._call_times = self._call_times, {}
            for key, times in gathered.items():
                metrics.observe_all(metrics.PROVIDER_CALL_SECONDS.labels(*key), times)

    def _time_left_s(self, entry: InFlight) -> float | None:
        """Seconds left before the job's execution deadline (None: it has none). Measured on
        the database's clock (the claim stamped updated_at), then on this host's monotonic
        clock since the claim: a skewed wall clock cannot shorten it."""
        job = entry.job
        if job.deadline_at is None:
            return None
        since_claim_s = self._clock.monotonic() - entry.renewed_at
        return (job.deadline_at - job.updated_at).total_seconds() - since_claim_s

    async def _streamed(
        self, provider: Provider, call: ProviderCall, entry: InFlight
    ) -> ProviderResult:
        """The call streamed into the job's output log; a retry of a job that continues its
        retries goes on from the partial output where the provider takes a prefix."""
        prefix = await output_stream.continuing_prefix(self._storage, entry.job, provider)
        batcher = output_stream.OutputBatcher(
            self._storage,
            entry.lease,
            generation=entry.job.run_count,
            clock=self._clock,
            continued_chars=len(prefix),
            on_fenced=lambda: self._output_fenced(entry),
            on_failed=lambda _: entry.stop(ABORT_OUTPUT_NOT_STORED),
        )
        return await output_stream.call_streaming(provider, call, batcher, prefix=prefix)

    async def _output_fenced(self, entry: InFlight) -> None:
        """An output append was fenced off: the lease is gone, or the job was purged (deleted
        while it streamed, its cancel requested first). Renewing this one lease tells which,
        so that a deleted job ends `cancelled` now, not when its lease runs out."""
        try:
            held = await self._storage.job_heartbeat(
                leases=[entry.lease], lease_ttl_s=self._settings.lease_ttl_s
            )
        except errors.StorageError:
            held = []
        cancelled = any(answer.cancel_requested for answer in held)
        entry.stop(ABORT_CANCEL if cancelled else ABORT_LEASE_LOST)

    async def _hold_shared_limits(self, job: Job, wait_s: float) -> None:
        """The provider rate-limited this job: its shared token buckets (the provider's and its
        model's, where `tpm` is set) are charged what `wait_s` is worth beyond what they hold
        back already (at most a minute of tokens, as any one job), so that no worker process
        starts a call there before the provider's reset, not only this job. (A request
        bucket, `rpm`, keeps its own pace: it has no debt to charge.)"""
        config = self._providers.configs().get(job.provider)
        if config is None or wait_s <= 0:
            return
        metered = [b for b in rate_limits.buckets_of(job.provider, config, job.model) if b.tpm]
        if not metered:
            return
        try:
            # Only what the bucket does not hold back already: jobs rate-limited together
            # must not add up their waits (this process's one after the other; two processes
            # at the same moment may, at worst, hold it twice as long).
            async with self._holding:
                await self._hold(metered, wait_s)
        except errors.StorageError:  # the job waits anyway; the others may meet the limit
            log.warning("could not hold the shared rate limit", extra={"job_id": job.id})

    async def _hold(self, metered: list[rate_limit_rules.Bucket], wait_s: float) -> None:
        """Charge each token bucket the tokens that close it for `wait_s` from now."""
        waits = await self._storage.rate_limit_waits(buckets=metered)
        spends = [
            (b, rate_limit_rules.charge(b, math.ceil(extra_s * b.tpm / 60)))
            for b in metered
            if (extra_s := wait_s - waits.get((b.provider, b.model), 0.0)) > 0
        ]
        if spends:
            await self._storage.rate_limit_spend(spends=spends)

    async def _reroute(self, entry: InFlight, finish: Finish) -> Finish:
        """A job for a model route whose attempt is to be retried moves to the route's next
        target first (fenced on its lease, logged as an event), when the attempt failed in a
        retryable way or was told to wait longer than the route allows. An unknown creation
        outcome stays where it is: the first provider may be running it."""
        job = entry.job
        route = self._providers.route_of(job.model_route)
        if route is None or job.model_route is None or job.model is None:
            return finish
        moves = (finish.reason == "retryable_error" and finish.creation_outcome is None) or (
            finish.reason == "rate_limited" and finish.retry_in_s > route.move_after_retry_after_s
        )
        if finish.state is not JobState.QUEUED or not moves:
            return finish
        target = self._providers.next_target(job.model_route, job.provider, job.model)
        if target is None:
            return finish
        provider, model = target
        try:
            moved = await self._storage.job_reroute(
                lease=entry.lease,
                provider=provider,
                model=model,
                actor=self.worker_id,
                reason=f"{finish.reason} on {job.provider}:{job.model}; next {provider}:{model}",
            )
        except errors.StorageError:
            return finish  # the retry stays on this target: still a correct retry
        if moved and finish.reason == "rate_limited":
            return dataclasses.replace(finish, retry_in_s=0.0)  # the next target is not limited
        return finish

    async def _account(
        self,
        entry: InFlight,
        finish: Finish,
        outcome: Finished | BaseException | None,
        unknown: bool,
        counts: collections.Counter[tuple[str, str, str]],
    ) -> Finished | None:
        """What was written for a verdict the batcher answered with `outcome` other than its
        record (`unknown`: an earlier attempt at it may have committed, its reply lost)."""
        if isinstance(outcome, BaseException):
            log.error(
                "could not record a verdict",
                exc_info=outcome,
                extra={"job_id": entry.job.id, "worker_id": self.worker_id},
            )
            return None
        if outcome is None and unknown:
            # The fence refusing this attempt proves nothing: read back.
            outcome = await readback.verdict_written(self._storage, entry.job, actor=self.worker_id)
        if outcome is None:
            return await self._written(entry, finish, outcome, counts)
        return self._counted(entry, finish, outcome, counts)

    def _gave_up(self, entry: InFlight, finish: Finish) -> None:
        log.warning(
            "could not record a verdict before the lease ran out",
            extra={"job_id": entry.job.id, "to_state": str(finish.state)},
        )

    async def _written(
        self,
        entry: InFlight,
        finish: Finish,
        written: Finished | None,
        counts: collections.Counter[tuple[str, str, str]] | None = None,
    ) -> Finished | None:
        """Account for a verdict's write: metrics and the summary (added to `counts` when
        given, for `_count` to report once for many), or the drop when the fence refused it."""
        if written is None:
            await self._record_dropped(entry, "lease_lost", to_state=finish)
            return None
        return self._counted(entry, finish, written, counts)

    def _counted(
        self,
        entry: InFlight,
        finish: Finish,
        written: Finished,
        counts: collections.Counter[tuple[str, str, str]] | None,
    ) -> Finished:
        """`_written` for a verdict that was written: counted (and logged at debug level)."""
        job = entry.job
        key = (job.provider, finish.reason, str(written.state))
        if counts is None:
            self._summary.count(collections.Counter((key,)))
        else:
            counts[key] += 1
        # One line per transition at debug level; at info, a summary at most every
        # finish_summary.SUMMARY_INTERVAL_S (a line per job costs more than the job).
        if log.isEnabledFor(logging.DEBUG):  # the line's fields are not built for nothing
            log.debug(
                "job transition",
                extra={
                    "job_id": written.job_id,
                    "tenant_id": job.tenant_id,
                    "from_state": JobState.RUNNING.value,
                    "to_state": str(written.state),
                    "reason": finish.reason,
                    "attempt": written.attempt,
                    "worker_id": self.worker_id,
                    "provider": job.provider,
                    # The error written is the verdict's own (a finish stores `finish.error`).
                    "error_code": (finish.error or {}).get("code")
                    if written.state is not JobState.SUCCEEDED
                    else None,
                },
            )
        return written

    async def _record_dropped(
        self, entry: InFlight, reason: str, *, to_state: Finish | None = None
    ) -> None:
        log.warning(
            "lease lost; result dropped",
            extra={"job_id": entry.job.id, "worker_id": self.worker_id},
        )
        if to_state is None:
            return
        with contextlib.suppress(errors.StorageError):
            await self._storage.job_record_ignored(
                job_id=entry.job.id, to_state=to_state.state, actor=self.worker_id, reason=reason
            )

    # -- heartbeats ------------------------------------------------------------------------

    async def heartbeat_once(self) -> bool:
        """Renew every held lease now (lease_keeper.LeaseKeeper.heartbeat_once)."""
        return await self._leases.heartbeat_once()

    def check_lease_expiry(self) -> None:
        """Stop the calls whose lease would run out before a renewal could land."""
        self._leases.check_lease_expiry()

    def on_cancel_requested(self, job_ids: list[str]) -> None:
        self._leases.on_cancel_requested(job_ids)

    # -- the long-running loop ---------------------------------------------------------------

    def request_stop(self) -> None:
        """Stop claiming; `run` then drains in-flight work and returns."""
        self._stopping = True
        self._wake.set()

    async def run(self) -> None:
        """Claim and run jobs until request_stop(); then finish in-flight work within the
        shutdown grace period and give the rest back to the queue at once."""
        changes = self._storage.changes
        with changes.watch_work() as work, changes.on_cancel(self.on_cancel_requested):
            heartbeats = asyncio.create_task(self._leases.run(), name="heartbeats")
            try:
                async with self._wake.relaying(work):
                    await self._claim_loop()
                    await self._drain()
                    if self._intake is not None:
                        await self._intake.drain()
            finally:
                heartbeats.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await heartbeats

    async def _claim_loop(self) -> None:
        backoff_s = 0.1
        while not self._stopping:
            self._wake.clear()
            asked = min(self.concurrency - self.busy, CLAIM_BATCH_MAX)  # as claim() asks
            try:
                jobs = await self.claim()
                backoff_s = 0.1
            except errors.StorageError as exc:
                log.warning(
                    "claim failed: %s", type(exc).__name__, extra={"worker_id": self.worker_id}
                )
                await self._wake.sleep(backoff_s)
                backoff_s = min(backoff_s * 2, 5.0)
                continue
            await self._start(jobs).started  # slots answered at once are free again
            # A claim answered in full may have left more queued: claim again at once. One
            # answered short found all there was to take then (a job committed since has sent
            # a wake-up, which `clear` above did not miss), so the next claim waits for the
            # wake-up instead of running to find nothing (under a steady trickle of submits,
            # every other claim would otherwise be an empty one).
            full = bool(jobs) and len(jobs) >= asked
            if (full or self._receive_waited) and self.busy < self.concurrency:
                continue  # the queue may hold more (or the broker's receive was the wait)
            poll_s = self._settings.worker_poll_interval_s
            if self._rate_limits.wait_s > 0:  # a rate limit admits again sooner than the poll
                poll_s = min(poll_s, self._rate_limits.wait_s)
            if await self._wake.sleep(poll_s) and not self._stopping:
                await asyncio.sleep(CLAIM_DEBOUNCE_S)  # let a trickle gather into one claim

    async def _drain(self) -> None:
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=self._settings.shutdown_grace_s)
        for entry in list(self._inflight.values()):
            entry.stop(ABORT_SHUTDOWN)
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=30)
            for task in pending:
                task.cancel()
        released = [e.job.id for e in self._inflight.values()]
        if released:
            log.warning("shutdown left jobs in flight", extra={"count": len(released)})
