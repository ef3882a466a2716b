"""Why queued jobs wait, read the way the claim reads it (domain.waiting orders the reasons).

Each fact comes from the code the claim itself runs: the pause covering a job and the slots
its tenant and key hold from the storage (the claims' SQL fragments), the tenant's caps and
budgets (and its keys' budgets) from LimitsService.claim_policy, the breaker from the provider
gates (shared through the database like the workers'), the rate limits (the provider's, the
key's rpm_per_key) from the shared buckets, a live worker from role presence. The cheap facts
are in process and cached as the claim caches them; the one read of the database is made only
for jobs that are queued.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, time, timedelta
from typing import Protocol

from jobgate.domain import rate_limits as rate_rules
from jobgate.domain import waiting
from jobgate.domain.job import Job
from jobgate.domain.states import JobState
from jobgate.domain.waiting import CapFact, KeyLimitFact, PauseFact, WaitFacts, Waiting
from jobgate.providers.gates import ProviderGates
from jobgate.services import presence, rate_limits
from jobgate.services.jobs import JobService
from jobgate.storage.protocol import RateLimitStore, WaitStore
from jobgate.storage.records import ClaimPolicy, WaitGroup, WaitRead

MAX_GROUPS = 1_000  # the console's count reads at most this many groups of alike jobs


@dataclasses.dataclass(frozen=True, slots=True)
class WaitCounts:
    """How many queued jobs wait for each reason (REASONS order), over the head of each
    tenant's line (Storage.queued_wait_groups)."""

    by_reason: dict[str, int]
    exact: bool  # False: some tenant's line is longer than the walk, so every count is a floor


class WaitStorage(WaitStore, RateLimitStore, Protocol):
    """What explaining a wait reads: the claim's facts, and the shared rate-limit buckets."""


class Waits:
    def __init__(
        self, *, storage: WaitStorage, jobs: JobService, presence_: presence.Presence
    ) -> None:
        self._storage = storage
        self._jobs = jobs
        self._presence = presence_

    @property
    def _gates(self) -> ProviderGates:
        return self._jobs.providers.gates

    async def of_job(self, job: Job, *, read: WaitRead | None = None) -> Waiting | None:
        """Why `job` waits: for a queued job the claim's first objection (None: a worker may
        claim it now); for a background job at its provider, a missing reconciler. `read`:
        what the status read already learnt of a queued job (Storage.job_status), so that
        nothing is read again unless its tenant's caps need counting."""
        if job.state is JobState.QUEUED:
            found = await self.of_queued([job], reads=None if read is None else {job.id: read})
            return found.get(job.id)
        if job.state is JobState.RUNNING and job.phase == "awaiting_provider":
            missing = await self._presence.reconciler_missing()
            if missing is not None:
                return Waiting(waiting.NO_WORKER, f"waiting for a reconciler: {missing}")
        return None

    async def reads(self, jobs: Sequence[Job]) -> dict[str, WaitRead]:
        """What the claim would read about the queued jobs of `jobs` (one tenant's), with
        their places in line, by id (a job no longer queued is left out)."""
        queued = [job for job in jobs if job.state is JobState.QUEUED]
        if not queued:
            return {}
        return await self._storage.job_wait_facts(
            tenant_id=queued[0].tenant_id,
            job_ids=[job.id for job in queued],
            count_running=False,
            count_keys=False,
            count_positions=True,
        )

    async def of_queued(
        self, jobs: Sequence[Job], *, reads: dict[str, WaitRead] | None = None
    ) -> dict[str, Waiting | None]:
        """Why each queued job of `jobs` (one tenant's) waits, by id; jobs that are not queued
        are left out. `reads`: what a status read learnt of them (else it is read here, with
        their places in line)."""
        queued = [job for job in jobs if job.state is JobState.QUEUED]
        if not queued:
            return {}
        tenant_id = queued[0].tenant_id
        policy = await self._policy()
        share = policy.share(tenant_id)
        count_running, count_keys = share.max_running > 0, share.max_running_per_key > 0
        if reads is None or count_running or count_keys:  # slots held: read with the caps
            counted = await self._storage.job_wait_facts(
                tenant_id=tenant_id,
                job_ids=[job.id for job in queued],
                count_running=count_running,
                count_keys=count_keys,
                count_positions=reads is None,
            )
            reads = {
                job_id: read
                if reads is None or job_id not in reads
                else dataclasses.replace(
                    read,
                    queue_position=reads[job_id].queue_position,
                    queue_position_exact=reads[job_id].queue_position_exact,
                )
                for job_id, read in counted.items()
            }
        no_worker = await self._presence.missing(presence.WORKER)
        key_waits = await self._key_waits(
            ((job.tenant_id, job.concurrency_key) for job in queued if job.id in reads),
            policy,
        )
        found: dict[str, Waiting | None] = {}
        for job in queued:
            read = reads.get(job.id)
            if read is None:  # claimed (or gone) since it was read
                continue
            facts = await self._facts(
                job.tenant_id,
                job.provider,
                job.model,
                key=job.concurrency_key,
                run_at=job.run_at,
                read=read,
                policy=policy,
                key_waits=key_waits,
                no_worker=no_worker,
                position=read.queue_position,
                exact=read.queue_position_exact,
            )
            found[job.id] = waiting.explain(facts)
        return found

    async def counts(self) -> WaitCounts:
        """How many queued jobs wait for each reason (REASONS order; `queue`: nothing holds
        them but their turn), from groups of alike jobs at the head of each tenant's line:
        the console's overview. A reason's count is a floor when not `exact` (a reason seen
        only behind the walk's bound is not counted at all)."""
        policy = await self._policy()
        tenant_ids: list[str] = list(policy.tenants)
        if policy.default.max_running > 0:  # every tenant without a share of its own
            tenant_ids = [t.id for t in await self._jobs.storage.tenant_list()]
        capped = [t for t in tenant_ids if policy.share(t).max_running > 0]
        groups = await self._storage.queued_wait_groups(
            keys=policy.keys_limited, capped_tenants=capped, limit=MAX_GROUPS
        )
        no_worker = await self._presence.missing(presence.WORKER)
        key_waits = await self._key_waits(
            ((group.tenant_id, group.concurrency_key) for group in groups), policy
        )
        counts = dict.fromkeys(waiting.REASONS, 0)
        for group in groups:
            facts = await self._facts(
                group.tenant_id,
                group.provider,
                group.model,
                key=group.concurrency_key,
                run_at=group.run_at,
                read=group,
                policy=policy,
                key_waits=key_waits,
                no_worker=no_worker,
                position=None,
                exact=False,
            )
            found = waiting.explain(facts)
            counts[waiting.QUEUE if found is None else found.reason] += group.queued
        complete = len(groups) < MAX_GROUPS and all(group.exact for group in groups)
        return WaitCounts(counts, exact=complete)

    async def _policy(self) -> ClaimPolicy:
        await self._jobs.breakers.sync()  # the breakers every worker reads (cached ~1 s)
        return await self._jobs.limits.claim_policy()

    async def _facts(
        self,
        tenant_id: str,
        provider: str,
        model: str | None,
        *,
        key: str | None,
        run_at: datetime,
        read: WaitRead | WaitGroup,
        policy: ClaimPolicy,
        key_waits: Mapping[tuple[str, str], float],
        no_worker: str | None,
        position: int | None,
        exact: bool,
    ) -> WaitFacts:
        now = read.now.timestamp()
        share = policy.share(tenant_id)
        gate = self._gates.gate(provider)
        breaker_until = provider_paused_s = None
        if gate is not None:
            left = gate.breaker.open_left_s()
            breaker_until = None if left is None else now + left
            provider_paused_s = gate.breaker.paused_left_s()
        return WaitFacts(
            now=now,
            run_at=run_at.timestamp(),
            provider=provider,
            pause=None if read.pause is None else PauseFact(read.pause["id"], read.pause["reason"]),
            no_worker=no_worker,
            over_budget_until=(
                _next_midnight(read.now) if tenant_id in policy.blocked_tenants else None
            ),
            key_over_budget=await self._key_budget(tenant_id, key, policy, read.now),
            breaker_open_until=breaker_until,
            rate_limited_s=await self._rate_wait_s(provider, model),
            provider_paused_s=provider_paused_s or 0.0,
            key_rate_limited=_key_rate(key_waits, tenant_id, key, share.rpm_per_key, now),
            tenant_cap=(
                CapFact(read.running, share.max_running)
                if read.running is not None and share.tenant_full(read.running)
                else None
            ),
            key_cap=(
                CapFact(read.key_running, share.max_running_per_key, key)
                if read.key_running is not None and share.key_full(read.key_running)
                else None
            ),
            queue_position=position,
            queue_position_exact=exact,
        )

    async def _key_budget(
        self, tenant_id: str, key: str | None, policy: ClaimPolicy, now: datetime
    ) -> KeyLimitFact | None:
        """The daily budget per key that holds `key` (None: none does), as the claim found."""
        limit = None if key is None else policy.blocked_keys.get((tenant_id, key))
        if key is None or limit is None:
            return None
        value = float(getattr(await self._jobs.limits.for_tenant(tenant_id), limit))
        return KeyLimitFact(key, limit, value, _next_midnight(now))

    async def _key_waits(
        self, pairs: Iterable[tuple[str, str | None]], policy: ClaimPolicy
    ) -> dict[tuple[str, str], float]:
        """Seconds until each (tenant, key) under rpm_per_key among `pairs` may start a job
        (absent: it may now), from its shared bucket, all in one read (none without one)."""
        buckets = {
            (tenant_id, key): rate_rules.key_bucket(tenant_id, key, rpm)
            for tenant_id, key in pairs
            if key is not None and (rpm := policy.share(tenant_id).rpm_per_key) > 0
        }
        if not buckets:
            return {}
        waits = await self._storage.rate_limit_waits(buckets=list(buckets.values()))
        return {
            pair: waits[(bucket.provider, bucket.model)]
            for pair, bucket in buckets.items()
            if (bucket.provider, bucket.model) in waits
        }

    async def _rate_wait_s(self, provider: str, model: str | None) -> float:
        """The shared buckets' wait for a job of `model` (0 without a rate limit: no read)."""
        providers = self._jobs.providers
        try:
            config = providers.config(provider)
        except KeyError:
            return 0.0
        return await rate_limits.wait_of(self._storage, provider, config, model)


def _key_rate(
    waits: Mapping[tuple[str, str], float], tenant_id: str, key: str | None, rpm: int, now: float
) -> KeyLimitFact | None:
    """The key's rpm_per_key, when its bucket admits no start yet (`waits`: _key_waits)."""
    wait_s = 0.0 if key is None else waits.get((tenant_id, key), 0.0)
    if key is None or wait_s <= 0:
        return None
    return KeyLimitFact(key, "rpm_per_key", rpm, now + wait_s)


def _next_midnight(now: datetime) -> float:
    """The next UTC midnight after `now` (the database's time): when daily budgets reset."""
    tomorrow = now.astimezone(UTC).date() + timedelta(days=1)
    return datetime.combine(tomorrow, time(0), tzinfo=UTC).timestamp()
