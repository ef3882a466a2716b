"""Tenant limits in force: jobgate.toml `[tenants.NAME]` (or `tenant_defaults`) overlaid with
`jobgate tenants set` overrides from the database, which win. Answers are cached for a couple of
seconds, so a change takes effect across every process within that time. Daily budgets (tokens,
or USD priced from the usage ledger and what retention rolled up of it today) pause a tenant's
claims until the next UTC midnight; the budgets per concurrency key pause that key's jobs alike.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections import deque
from collections.abc import Mapping
from datetime import UTC, date
from decimal import Decimal

from jobgate import errors
from jobgate.clock import Clock
from jobgate.config import Settings, TenantLimits
from jobgate.domain import costs
from jobgate.domain import limits as rules
from jobgate.domain.job import NewJob
from jobgate.storage.protocol import Storage
from jobgate.storage.records import (
    ClaimPolicy,
    LimitOverrides,
    QueueLimit,
    TenantShare,
)

log = logging.getLogger(__name__)

# Admission counts exactly (in the insert's transaction, under a lock on PostgreSQL) once the
# last count leaves less room than this below a bound (so a bound up to this size is always
# counted). Far from a bound a submit skips the count, which is safe as long as the whole
# deployment cannot admit this many jobs a second, for as long as a count serves (recount_after).
_EXACT_ROOM = 10_000


# How long a count of the queue serves: a second while some bound is near (or full), longer
# the farther every bound is, up to this.
_RECOUNT_MIN_S = 1.0
_RECOUNT_MAX_S = 30.0


def _near(count: int, bound: int) -> bool:
    return bound - count <= _EXACT_ROOM


def recount_after(rooms: list[int]) -> float:
    """Seconds until the queue must be counted again, given the room the count left under each
    bound an insert may skip counting (the total, each capped tenant's). Submits skip the exact
    count only while a bound's room exceeds _EXACT_ROOM, on the premise that the deployment
    admits fewer than _EXACT_ROOM jobs a second; a count leaving `room` under every bound stays
    as safe for room / _EXACT_ROOM seconds. Near a bound (or at it: its refusals must end soon
    after the queue drains, and Retry-After needs recent drain rates) it is counted every
    second."""
    room = min(rooms, default=_EXACT_ROOM)
    if room <= _EXACT_ROOM:
        return _RECOUNT_MIN_S
    return min(_RECOUNT_MAX_S, max(_RECOUNT_MIN_S, room / _EXACT_ROOM))


def apply_overrides(base: TenantLimits, overrides: LimitOverrides | None) -> TenantLimits:
    if overrides is None:
        return base
    changes = {k: v for k, v in dataclasses.asdict(overrides).items() if v is not None}
    return base.model_copy(update=changes)


def _share(limits: TenantLimits) -> TenantShare:
    return TenantShare(
        limits.max_running, limits.weight, limits.max_running_per_key, limits.rpm_per_key
    )


def _budgeted(limits: TenantLimits) -> bool:
    """Whether a tenant has a daily budget of its own or per concurrency key."""
    return (
        limits.daily_token_budget > 0 or limits.daily_cost_budget_usd > 0 or _key_budgeted(limits)
    )


def _key_budgeted(limits: TenantLimits) -> bool:
    return limits.daily_token_budget_per_key > 0 or limits.daily_cost_budget_usd_per_key > 0


@dataclasses.dataclass(frozen=True, slots=True)
class Admission:
    """LimitsService.admit for one tenant at one moment: `admit` checks each job against it
    in the same order (allowed providers and models, the output-token cap, a full queue)."""

    limits: TenantLimits
    output_tokens_mode: str
    full: errors.QueueFull | None  # the refusal every job gets (the last count found it full)
    bounds: QueueLimit | None  # what the insert must count exactly (None: far from full)

    def admit(self, job: NewJob) -> NewJob:
        """The job as it may be stored (output tokens capped); raises errors.LimitExceeded
        naming the limit, or errors.QueueFull."""
        limits = self.limits
        # Each rule is asked only when the tenant has it (no allowed list allows everything, a
        # cap of 0 caps nothing): the usual tenant's item costs two tests, not two calls.
        if limits.allowed_models or limits.allowed_providers:
            rules.check_allowed(
                model=job.model,
                provider=job.provider,
                allowed_models=limits.allowed_models,
                allowed_providers=limits.allowed_providers,
            )
        if limits.max_output_tokens > 0:
            body = rules.cap_output_tokens(
                job.endpoint,
                job.request,
                cap=limits.max_output_tokens,
                mode=self.output_tokens_mode,
            )
            if body is not job.request:
                job = dataclasses.replace(job, request=body)
        if self.full is not None:  # a new exception each time: one item's traceback each
            raise errors.QueueFull(self.full.limit, self.full.retry_after_s)
        return job


class LimitsService:
    def __init__(
        self, *, storage: Storage, settings: Settings, clock: Clock, refresh_s: float = 2.0
    ) -> None:
        self._storage = storage
        self._settings = settings
        self._clock = clock
        self._refresh_s = refresh_s
        self._limits_at = -1e18
        self._by_tenant: dict[str, TenantLimits] = {}
        self._queue_at = -1e18
        self._recount_s = _RECOUNT_MIN_S  # how long the last count serves (recount_after)
        self._queued: dict[str, int] = {}  # at the last count
        self._admitted: dict[str, int] = {}  # by this process since the last count
        # Their sums, kept: a submit reads them (summing a dict per submit is O(tenants)).
        self._queued_total = 0
        self._admitted_total = 0
        self._claims: deque[tuple[float, dict[str, int]]] = deque()
        self._budget_at = -1e18
        self._blocked: frozenset[str] = frozenset()
        self._blocked_keys: Mapping[tuple[str, str], str] = {}
        # The last claim policy, kept while the limits it was built from are (a claim and
        # every status read of a queued job ask for it; building it walks every tenant).
        self._policy: ClaimPolicy | None = None
        self._limits_read = 0  # how many times the limits were read
        self._policy_read = -1  # ... when the policy was built
        self._policy_budgeted = False  # whether some tenant has a daily budget then
        self._prices = settings.prices()
        self._batch_discounts = settings.batch_discounts()
        self._unpriced_logged: set[tuple[str, str | None]] = set()
        # One refresh of each cache at a time: the submits that find it stale while a refresh
        # runs wait for that one instead of each sending its own (at 3,000 submits/s a second's
        # expiry sent one count of the whole queue per concurrent request).
        self._limits_lock = asyncio.Lock()
        self._queue_lock = asyncio.Lock()
        self._budget_lock = asyncio.Lock()

    # -- effective limits ------------------------------------------------------------------

    async def _refresh_limits(self) -> None:
        if self._clock.monotonic() - self._limits_at < self._refresh_s:
            return
        async with self._limits_lock:
            if self._clock.monotonic() - self._limits_at < self._refresh_s:
                return  # refreshed while this caller waited
            overrides = await self._storage.tenant_limits_all()
            tenants = await self._storage.tenant_list()
            self._by_tenant = {
                t.id: apply_overrides(self._settings.limits_for(t.name), overrides.get(t.id))
                for t in tenants
            }
            self._limits_at = self._clock.monotonic()
            self._limits_read += 1

    def reconfigure(self, settings: Settings) -> None:
        """Tenant limits and prices from a reloaded configuration, from the next claim on."""
        self._settings = settings
        self._prices = settings.prices()
        self._batch_discounts = settings.batch_discounts()
        self.invalidate()

    def invalidate(self) -> None:
        self._limits_at = self._queue_at = self._budget_at = -1e18

    async def for_tenant(self, tenant_id: str) -> TenantLimits:
        await self._refresh_limits()
        if tenant_id not in self._by_tenant:  # a tenant created since the last refresh
            self._limits_at = -1e18
            await self._refresh_limits()
        return self._by_tenant.get(tenant_id, self._settings.tenant_defaults)

    # -- admission (submit) ----------------------------------------------------------------

    async def admit(
        self, job: NewJob, *, may_replay: bool = False
    ) -> tuple[NewJob, QueueLimit | None]:
        """The job as it may be stored (output tokens capped), and the queue bounds the
        insert must check exactly (None while the queues are far from full). Raises
        errors.LimitExceeded naming the limit. `may_replay`: the submit carries an
        Idempotency-Key, so a full queue must still let the storage answer a replay."""
        admission = await self.admission(job.tenant_id, may_replay=may_replay)
        return admission.admit(job), admission.bounds

    async def admission(
        self, tenant_id: str, *, may_replay: bool = False, adding: int = 0
    ) -> Admission:
        """What admit decides for any job of `tenant_id` now, read once for a call that
        submits many (its limits, and the last queue counts: see recount_after). `adding`:
        how many jobs the call may store at once beyond the first, so that a batch that could
        reach a bound is counted exactly by its insert."""
        limits = await self.for_tenant(tenant_id)
        await self._refresh_queue()
        tenant_max = limits.max_queued or None
        total_max = self._settings.max_queued_total
        # A bound the last count (at most a second old) found full refuses at once: a tenant
        # hammering a full queue costs no count. Otherwise, near a bound, the insert counts.
        full = None
        if not may_replay:
            if tenant_max is not None and self._queued.get(tenant_id, 0) >= tenant_max:
                full = self.queue_full(errors.QueueFull("max_queued", 0), tenant_id)
            elif self._queued_total >= total_max:
                full = self.queue_full(errors.QueueFull("max_queued_total", 0), tenant_id)
        queued = self._queued.get(tenant_id, 0) + self._admitted.get(tenant_id, 0)
        total = self._queued_total + self._admitted_total
        near_tenant = tenant_max is not None and _near(queued + adding, tenant_max)
        near_total = _near(total + adding, total_max)
        # A tenant the count did not foresee (created since, or admitted into by this process)
        # may bring the next count nearer.
        rooms = [total_max - total] + ([] if tenant_max is None else [tenant_max - queued])
        self._recount_s = min(self._recount_s, recount_after(rooms))
        bounds = None
        if near_tenant or near_total:
            bounds = QueueLimit(
                tenant_max=tenant_max if near_tenant else None,
                total_max=total_max if near_total else None,
            )
        return Admission(limits, self._settings.max_output_tokens_mode, full, bounds)

    def admitted(self, tenant_id: str, count: int = 1) -> None:
        """Jobs this process just stored: counted until the next count includes them."""
        self._admitted[tenant_id] = self._admitted.get(tenant_id, 0) + count
        self._admitted_total += count

    def queue_full(self, exc: errors.QueueFull, tenant_id: str) -> errors.QueueFull:
        """The refusal with a Retry-After from the tenant's (or everyone's) drain rate."""
        if exc.limit == "max_queued_total":
            rate = self._drain_rate(None)
            excess = max(1, self._queued_total - self._settings.max_queued_total + 1)
        else:
            rate = self._drain_rate(tenant_id)
            limit = self._by_tenant.get(tenant_id, self._settings.tenant_defaults).max_queued
            excess = max(1, self._queued.get(tenant_id, 0) - limit + 1)
        return errors.QueueFull(exc.limit, rules.retry_after_s(excess=excess, drain_per_s=rate))

    async def _refresh_queue(self) -> None:
        if self._clock.monotonic() - self._queue_at < self._recount_s:
            return
        async with self._queue_lock:
            if self._clock.monotonic() - self._queue_at < self._recount_s:
                return  # counted while this caller waited
            await self._count_queue()

    async def _count_queue(self) -> None:
        now = self._clock.monotonic()
        counts = await self._storage.queue_counts()
        self._queued = dict(counts.queued_by_tenant)
        self._queued_total = sum(self._queued.values())
        self._admitted, self._admitted_total = {}, 0
        self._claims.append((now, dict(counts.claimed_by_tenant)))
        while len(self._claims) > 2 and now - self._claims[1][0] >= 30:
            self._claims.popleft()
        self._queue_at = now
        self._recount_s = recount_after(self._rooms())

    def _rooms(self) -> list[int]:
        """The room the last count left under each bound: everyone's, each capped tenant with
        queued jobs, and the smallest cap above _EXACT_ROOM of a tenant with none (a smaller
        cap is near from a tenant's first job on, so its inserts count exactly)."""
        defaults = self._settings.tenant_defaults.max_queued
        rooms = [self._settings.max_queued_total - self._queued_total]
        for tenant_id, count in self._queued.items():
            cap = self._by_tenant.get(tenant_id, self._settings.tenant_defaults).max_queued
            if cap:
                rooms.append(cap - count)
        idle_caps = [
            limits.max_queued
            for tenant_id, limits in self._by_tenant.items()
            if limits.max_queued > _EXACT_ROOM and tenant_id not in self._queued
        ]
        if defaults > _EXACT_ROOM:
            idle_caps.append(defaults)
        if idle_caps:
            rooms.append(min(idle_caps))
        return rooms

    def _drain_rate(self, tenant_id: str | None) -> float | None:
        """Claims per second over the last ~30 s (None until two samples exist)."""
        if len(self._claims) < 2:
            return None
        (start, first), (end, last) = self._claims[0], self._claims[-1]
        if end <= start:
            return None

        def total(snapshot: dict[str, int]) -> int:
            if tenant_id is None:
                return sum(snapshot.values())
            return snapshot.get(tenant_id, 0)

        return (total(last) - total(first)) / (end - start)

    # -- claims (workers) ------------------------------------------------------------------

    async def claim_policy(self) -> ClaimPolicy:
        """Caps and weights per tenant, and the tenants over a daily budget: the same object
        until the limits are read again or the budgets summed again."""
        await self._refresh_limits()
        policy = self._policy
        budgets_due = self._clock.monotonic() - self._budget_at >= self._refresh_s
        if policy is not None and self._policy_read == self._limits_read:
            if not (self._policy_budgeted and budgets_due):
                return policy
        defaults = self._settings.tenant_defaults
        default = _share(defaults)
        shares = {
            tenant_id: _share(limits)
            for tenant_id, limits in self._by_tenant.items()
            if _share(limits) != default
        }
        blocked, blocked_keys = await self._over_budget()
        policy = ClaimPolicy(
            default=default,
            tenants=shares,
            blocked_tenants=blocked,
            blocked_keys=blocked_keys,
        )
        self._policy, self._policy_read = policy, self._limits_read
        self._policy_budgeted = any(_budgeted(limits) for limits in self._by_tenant.values())
        return policy

    async def _over_budget(self) -> tuple[frozenset[str], Mapping[tuple[str, str], str]]:
        """The tenants over a daily budget, and the concurrency keys over one per key."""
        tokens = {
            t: lim.daily_token_budget
            for t, lim in self._by_tenant.items()
            if lim.daily_token_budget > 0
        }
        usd = {
            t: costs.usd(lim.daily_cost_budget_usd)
            for t, lim in self._by_tenant.items()
            if lim.daily_cost_budget_usd > 0
        }
        keyed = {t: lim for t, lim in self._by_tenant.items() if _key_budgeted(lim)}
        if not tokens and not usd and not keyed:
            return frozenset(), {}
        if self._clock.monotonic() - self._budget_at >= self._refresh_s:
            async with self._budget_lock:
                if self._clock.monotonic() - self._budget_at >= self._refresh_s:
                    await self._sum_budgets(tokens, usd, keyed)
        return self._blocked, self._blocked_keys

    async def _sum_budgets(
        self, tokens: dict[str, int], usd: dict[str, Decimal], keyed: dict[str, TenantLimits]
    ) -> None:
        today = await self._today()
        blocked: set[str] = set()
        if tokens:
            used = await self._storage.usage_tokens_since(day=today)
            blocked.update(t for t, budget in tokens.items() if used.get(t, 0) >= budget)
        if usd:
            spent = await self._spend_since(today)
            blocked.update(t for t, budget in usd.items() if spent.get(t, 0) >= budget)
        if blocked != self._blocked and blocked:
            log.warning(
                "tenants over their daily budget: claims paused",
                extra={"count": len(blocked)},
            )
        self._blocked = frozenset(blocked)
        self._blocked_keys = await self._keys_over_budget(today, keyed)
        self._budget_at = self._clock.monotonic()

    async def _keys_over_budget(
        self, today: date, keyed: dict[str, TenantLimits]
    ) -> dict[tuple[str, str], str]:
        if not keyed:
            return {}
        usage = await self._storage.usage_by_key_since(day=today, tenant_ids=list(keyed))
        budgets = {
            tenant_id: rules.KeyBudget(
                lim.daily_token_budget_per_key, costs.usd(lim.daily_cost_budget_usd_per_key)
            )
            for tenant_id, lim in keyed.items()
        }
        tokens: dict[tuple[str, str], int] = {}
        for row in usage:
            if row.concurrency_key is not None:
                key = (row.tenant_id, row.concurrency_key)
                tokens[key] = tokens.get(key, 0) + row.tokens
        priced = any(budget.usd > 0 for budget in budgets.values())
        spend = self._priced(usage).by_key if priced else {}
        blocked = rules.keys_over_budget(budgets, tokens, spend)
        if blocked and blocked.keys() != self._blocked_keys.keys():
            log.warning(
                "concurrency keys over their daily budget: their claims paused",
                extra={"count": len(blocked)},
            )
        return blocked

    # -- spend -----------------------------------------------------------------------------

    @property
    def priced(self) -> bool:
        """Whether any provider has prices (else every spend is 0)."""
        return bool(self._prices)

    async def spend_today(self) -> dict[str, Decimal]:
        """Each tenant's spend in USD since UTC midnight (tenants without usage are absent).
        One grouped query, not cached: for `tenants show` and /metrics."""
        return await self._spend_since(await self._today())

    async def _spend_since(self, day: date) -> dict[str, Decimal]:
        return self._priced(await self._storage.usage_by_model_since(day=day)).by_tenant

    def _priced(self, usage: list[costs.UsageTotal]) -> costs.Spend:
        """The usage priced; a (provider, model) without a price is logged once."""
        spend = costs.spend(usage, self._prices, self._batch_discounts)
        for provider, model in sorted(spend.unpriced - self._unpriced_logged, key=str):
            # Once per (provider, model) and process: the operator should add a price (or a
            # "*" price for the provider); until then this usage costs 0 against budgets.
            log.warning(
                "usage without a configured price counts 0 towards cost budgets",
                extra={"provider": provider, "model": model},
            )
        self._unpriced_logged.update(spend.unpriced)
        return spend

    async def _today(self) -> date:
        """Today, UTC, by the database's clock (usage is stamped by it; a host whose clock is
        off would count the wrong day)."""
        return (await self._storage.database_now()).astimezone(UTC).date()
