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
import dataclasses
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
from jobgate.services import (
    background,
    finish_batcher,
    output_stream,
    rate_limits,
    readback,
    tenant_labels,
)
from jobgate.services.breaker_sync import BreakerSync
from jobgate.services.call_verdicts import CallVerdicts, call_of
from jobgate.services.finish_summary import FinishSummary
from jobgate.services.lease_keeper import (
    ABORT_CANCEL,
    ABORT_LEASE_EXPIRING,
    ABORT_LEASE_LOST,
    ABORT_OUTPUT_NOT_STORED,
    ABORT_SHUTDOWN,
    InFlight,
    LeaseKeeper,
)
from jobgate.services.limits import LimitsService
from jobgate.services.poison_log import log_poison
from jobgate.services.rate_limits import ClaimTarget, RateLimiter
from jobgate.storage import protocol
from jobgate.storage.records import ClaimPolicy, Finished
from jobgate.transports.base import Transport
from jobgate.transports.intake import Intake

log = logging.getLogger(__name__)

CLAIM_BATCH_MAX = finish_batcher.MAX_BATCH  # jobs leased by one claim statement
# When work trickles in (each wake-up finds a job or two), wait this long after a wake-up so
# the next claim leases what arrived meanwhile in one statement, not one statement per job.
CLAIM_DEBOUNCE_S = 0.005


# A provider's `call_now` (providers.base.AnswersAtOnce).
_CallNow = Callable[[ProviderCall], ProviderResult | None]


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
        answer_now: bool = True,
    ) -> None:
        self.worker_id = worker_id or default_worker_id()
        # Run the calls a provider answers at once (providers.base.AnswersAtOnce) batch-wise;
        # False runs every job in its own task (the tests compare both paths).
        self._answer_now = answer_now
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
        self._breakers = BreakerSync(
            storage=storage, gates=providers.gates, clock=self._clock, owner=self.worker_id
        )
        self._inflight: dict[str, InFlight] = {}
        self._writing = 0  # entries whose verdict is with the finish batcher (slot freed)
        self._summary = FinishSummary(clock=self._clock, worker_id=self.worker_id)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._batcher = finish_batcher.FinishBatcher(storage)
        self._verdicts = CallVerdicts(
            providers=providers, settings=settings, actor=self.worker_id, rng=rng
        )
        # Background mode (providers that run the job on their side): create, record, let go.
        self._background = background.BackgroundStarter(
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
        """Run claimed jobs to their written verdicts, as the loop does: those a provider
        answers at once together, the others each in `execute`. The answer holds, in order,
        what was written for each job (None: the lease was lost)."""
        ready, each = self._split(jobs)
        answered, later = self._answer(ready)
        each += later
        one_by_one = asyncio.gather(*(self.execute(job) for job in each))
        try:
            together = await self._write_now(answered)  # while the others run
        except BaseException:
            one_by_one.cancel()  # cancelled: so are the others, as one gather of all would be
            raise
        ids = [entry.job.id for entry, _ in answered] + [job.id for job in each]
        by_id = dict(zip(ids, [*together, *await one_by_one], strict=True))
        return [by_id[job.id] for job in jobs]

    async def _read_back(self, done: Finished | None) -> Job | None:
        return None if done is None else await self._storage.job_get(job_id=done.job_id)

    async def execute(self, job: Job) -> Finished | None:
        """Run one claimed job: call its provider, then write the verdict under its lease.
        The answer is what was written (narrow: the loop only counts and logs it), or None
        where the lease was lost."""
        entry = self._inflight[job.id]
        try:
            finish = await self._attempt_or_poison(entry)
            if finish is None:
                await self._record_dropped(entry, "lease_lost")
                return None
            if not isinstance(finish, background.Accepted):
                succeeded = finish.state is JobState.SUCCEEDED
                await self._rate_limits.settle(job, finish.usage, succeeded=succeeded)
                if finish.reason == "rate_limited":
                    await self._hold_shared_limits(job, finish.retry_in_s)
                finish = await self._reroute(entry, finish)
            if isinstance(finish, background.Accepted):
                # Background mode: record the provider's id (fenced) and free the slot.
                accepted = await self._background.accept(job, entry.lease, finish)
                if accepted is None:
                    return None
                return Finished(accepted.id, accepted.state, accepted.attempt)
            return await self._write(entry, finish)
        finally:
            self._release(entry)

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

    # -- calls answered at once, batch-wise --------------------------------------------------

    def _split(self, jobs: list[Job]) -> tuple[list[tuple[InFlight, _CallNow]], list[Job]]:
        """Claimed jobs whose provider may answer at once, and the jobs to run each in its own
        task: every job that needs more than a call and its verdict (a deadline, live output,
        a model route, a rate limit, a stop requested, a damaged row, background mode, spans
        being recorded) takes the task path, where those features live."""
        if not self._answer_now or tracing.recording():
            return [], list(jobs)
        ready: list[tuple[InFlight, _CallNow]] = []
        each: list[Job] = []
        limited = self._rate_limits.limited
        found: dict[tuple[str, str, str], _CallNow | None] = {}  # looked up once per batch
        for job in jobs:
            entry = self._inflight[job.id]
            call_now = None
            if (
                job.deadline_at is None
                and job.model_route is None
                and not job.damaged
                and entry.abort_reason is None
                and job.provider not in limited
                and not output_stream.wants_stream(job)
            ):
                key = (job.provider, job.api, job.endpoint)
                if key not in found:
                    found[key] = self._call_now(job)
                call_now = found[key]
            if call_now is None:
                each.append(job)
            else:
                ready.append((entry, call_now))
        return ready, each

    def _call_now(self, job: Job) -> _CallNow | None:
        """The job's provider's `call_now`, when it has one and runs the job in the
        foreground. Whatever goes wrong in finding it is the task path's to judge (it fails the
        job alone as `poison_job` when its handling raises)."""
        try:
            provider = self._providers.get(job.provider, api=job.api)
            if provider_background.background_for(provider, job.endpoint) is not None:
                return None
            call_now: _CallNow | None = getattr(provider, "call_now", None)
        except Exception:
            return None
        return call_now

    def _answer(
        self, ready: list[tuple[InFlight, _CallNow]]
    ) -> tuple[list[tuple[InFlight, Finish]], list[Job]]:
        """Each ready job's verdict from its provider's immediate answer, in one loop (what
        `_attempt_or_poison` decides for it, without a task); the jobs whose provider cannot
        answer at once after all are returned to run in their own task."""
        answered: list[tuple[InFlight, Finish]] = []
        later: list[Job] = []
        timings: dict[tuple[str, str], list[float]] = {}  # (provider, outcome): call times
        for entry, call_now in ready:
            job = entry.job
            if entry.abort_reason is not None:  # stopped since the claim: the task path says how
                later.append(job)
                continue
            try:
                started = self._clock.monotonic()
                try:
                    outcome: ProviderResult | BaseException | None = call_now(call_of(job))
                except Exception as exc:  # judged like the awaited call's errors
                    outcome = exc
                if outcome is None:
                    later.append(job)
                    continue
                # The task path's failpoints, hit once the answer is known: answering at once
                # has no effect outside this process, so a crash here is one before the call.
                failpoints.hit("before_provider_call", job.model)
                failpoints.hit("after_provider_response")
                finish = self._verdicts.of_outcome(job, outcome)
                key = (
                    job.provider,
                    "succeeded"
                    if finish.state is JobState.SUCCEEDED
                    else (finish.error or {}).get("type", "error"),
                )
                timings.setdefault(key, []).append(self._clock.monotonic() - started)
            except Exception as exc:
                detail = verdicts.poison_detail(job, exc)
                log_poison("worker", Poisoning(job.id, detail, exc))
                metrics.POISON_JOBS.labels("worker").inc()
                finish = verdicts.poison_verdict(job, detail, actor=self.worker_id)
            answered.append((entry, finish))
        for key, times in timings.items():
            metrics.observe_all(metrics.PROVIDER_CALL_SECONDS.labels(*key), times)
        return answered, later

    def _hand_over(self, answered: list[tuple[InFlight, Finish]]) -> None:
        """The verdicts are the finish batcher's: their slots are free for the next claim
        (the entries keep their leases, and heartbeats, until the write lands)."""
        for entry, _ in answered:
            if not entry.writing:
                entry.writing = True
                self._writing += 1
        self._wake.set()

    async def _write_now(self, answered: list[tuple[InFlight, Finish]]) -> list[Finished | None]:
        """`_write` for verdicts computed together: queued with the finish batcher at once,
        retried together while the database is unavailable, each accounted as `_write` does;
        then each job is let go as `execute` does."""
        results: list[Finished | None] = [None] * len(answered)
        self._hand_over(answered)
        counts: collections.Counter[tuple[str, str, str]] = collections.Counter()
        try:
            todo = list(range(len(answered)))
            unknown: set[int] = set()  # an earlier attempt may have committed
            delay_s = 0.05
            while todo:
                outcomes = await self._batcher.finish_many([answered[i][1] for i in todo])
                again: list[int] = []
                for i, outcome in zip(todo, outcomes, strict=True):
                    entry, finish = answered[i]
                    if isinstance(outcome, errors.StorageUnavailable):
                        unknown.add(i)
                        if self._clock.monotonic() - entry.renewed_at >= self._settings.lease_ttl_s:
                            self._gave_up(entry, finish)
                        else:
                            again.append(i)
                        continue
                    if isinstance(outcome, BaseException):
                        log.error(
                            "could not record a verdict",
                            exc_info=outcome,
                            extra={"job_id": entry.job.id, "worker_id": self.worker_id},
                        )
                        continue
                    if outcome is None and i in unknown:
                        outcome = await readback.verdict_written(
                            self._storage, entry.job, actor=self.worker_id
                        )
                    if outcome is None:
                        results[i] = await self._written(entry, finish, outcome, counts)
                    else:  # nearly every verdict: accounted without a coroutine per job
                        results[i] = self._counted(entry, finish, outcome, counts)
                todo = again
                if todo:
                    await self._clock.sleep(delay_s)
                    delay_s = min(delay_s * 2, 2.0)
        finally:
            self._summary.count(counts)
            for entry, _ in answered:
                self._release(entry, wake=False)
            self._wake.set()  # once for the batch
        return results

    async def _attempt_or_poison(self, entry: InFlight) -> Finish | background.Accepted | None:
        """The attempt, except that a job this worker cannot handle (its row damaged, or
        handling it raises) fails alone as `poison_job` instead of taking the worker down."""
        job = entry.job
        try:
            if job.damaged:
                detail = verdicts.poison_detail(job)
                log_poison("worker", Poisoning(job.id, detail))
                metrics.POISON_JOBS.labels("worker").inc()
                return verdicts.poison_verdict(job, detail, actor=self.worker_id)
            return await self._attempt(entry)
        except errors.StorageError:
            raise  # the database's trouble, not the job's
        except Exception as exc:
            detail = verdicts.poison_detail(job, exc)
            log_poison("worker", Poisoning(job.id, detail, exc))
            metrics.POISON_JOBS.labels("worker").inc()
            return verdicts.poison_verdict(job, detail, actor=self.worker_id)

    async def _attempt(self, entry: InFlight) -> Finish | background.Accepted | None:
        job = entry.job
        actor = self.worker_id
        try:
            provider = self._providers.get(job.provider, api=job.api)
        except errors.UnknownProvider as exc:
            fatal = errors.ProviderFatal(exc.message, code="unknown_provider")
            return self._verdicts.failed(job, fatal)
        timeout_s = self._time_left_s(entry)
        if timeout_s is not None and timeout_s <= 0:
            return verdicts.deadline_exceeded(job, actor=actor)
        call = call_of(job, stall_timeout_s=self._settings.stall_timeout_s)
        failpoints.hit("before_provider_call", job.model)
        in_background = provider_background.background_for(provider, job.endpoint)
        if in_background is not None:
            return await self._background.start(job, entry.lease, call, in_background)
        if entry.abort_reason is not None:  # stopped before the call began
            return self._verdicts.aborted(job, entry.abort_reason)
        started = self._clock.monotonic()
        task = asyncio.current_task()
        assert task is not None
        outcome: ProviderResult | BaseException
        with tracing.span(
            "jobgate.provider_call",
            job_id=job.id,
            provider=job.provider,
            endpoint=job.endpoint,
            attempt=job.attempt,
        ):
            deadline = asyncio.timeout(timeout_s)
            try:
                entry.calling = task  # stop() cancels this task, only while it is in the call
                try:
                    async with deadline:
                        outcome = await self._provider_call(provider, call, entry)
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
                if deadline.expired():
                    return verdicts.deadline_exceeded(job, actor=actor)
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
        worker's), its duration observed."""
        job = entry.job
        if entry.abort_reason in (ABORT_LEASE_LOST, ABORT_LEASE_EXPIRING):
            return None
        if entry.abort_reason == ABORT_OUTPUT_NOT_STORED:  # its answer would lack the output
            return self._verdicts.aborted(job, entry.abort_reason)
        verdict = self._verdicts.of_outcome(job, outcome)
        metrics.PROVIDER_CALL_SECONDS.labels(
            job.provider,
            "succeeded"
            if verdict.state is JobState.SUCCEEDED
            else (verdict.error or {}).get("type", "error"),
        ).observe(self._clock.monotonic() - started)
        return verdict

    def _time_left_s(self, entry: InFlight) -> float | None:
        """Seconds left before the job's execution deadline (None: it has none). Measured on
        the database's clock (the claim stamped updated_at), then on this host's monotonic
        clock since the claim: a skewed wall clock cannot shorten it."""
        job = entry.job
        if job.deadline_at is None:
            return None
        since_claim_s = self._clock.monotonic() - entry.renewed_at
        return (job.deadline_at - job.updated_at).total_seconds() - since_claim_s

    def _provider_call(
        self, provider: Provider, call: ProviderCall, entry: InFlight
    ) -> Coroutine[Any, Any, ProviderResult]:
        """The call; for a job that asked for live output, streamed into its output log."""
        if not output_stream.wants_stream(entry.job):
            return provider.call(call)
        return self._streamed(provider, call, entry)

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

    async def _write(self, entry: InFlight, finish: Finish) -> Finished | None:
        if not entry.writing:  # the slot is free for the next claim while the batch commits
            entry.writing = True
            self._writing += 1
            self._wake.set()
        delay_s = 0.05
        outcome_unknown = False
        while True:
            try:
                written = await self._batcher.finish(finish)
                if written is None and outcome_unknown:
                    # An earlier attempt may have committed with its reply lost: the fence
                    # refusing this one proves nothing. Read back.
                    written = await readback.verdict_written(
                        self._storage, entry.job, actor=self.worker_id
                    )
                break
            except errors.StorageUnavailable:
                outcome_unknown = True
                # Keep trying while our lease may still hold; after that the job is the
                # reaper's, and writing would be wrong anyway (the fence would refuse it).
                if self._clock.monotonic() - entry.renewed_at >= self._settings.lease_ttl_s:
                    self._gave_up(entry, finish)
                    return None
                await self._clock.sleep(delay_s)
                delay_s = min(delay_s * 2, 2.0)
        return await self._written(entry, finish, written)

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
                    "from_state": "running",
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

    def _spawn(self, job: Job) -> None:
        task = asyncio.create_task(self.execute(job), name=f"job {job.id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _start(self, jobs: list[Job]) -> None:
        """Run claimed jobs: the calls a provider answers at once here and now, their verdicts
        handed over together (their slots free before the next claim, which then shares the
        write's transaction), the others each in its own task."""
        ready, each = self._split(jobs)
        answered, later = self._answer(ready)
        for job in [*each, *later]:
            self._spawn(job)
        if answered:
            self._hand_over(answered)
            task = asyncio.create_task(self._write_now(answered), name="verdicts answered at once")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

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
            self._start(jobs)
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
