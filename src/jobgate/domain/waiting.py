"""Why a job waits: the `waiting` member of a job's view, from the facts the claim decides on.

A queued job is claimable when its run_at has come, no pause covers it, a worker is alive, its
tenant (and concurrency key) are within their daily budgets, its provider's breaker is closed,
the shared rate limits (its provider's, its key's rpm_per_key) admit it and its tenant (and
concurrency key) have a free slot: the same tests, in the same
terms, as the claim statements (services.waiting reads them the way the claim does). The first
one that fails is the reason; when none fails the job waits only for its turn (`queue`), or not
at all (None: first in its tenant's line, a worker may claim it now).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

SCHEDULED = "scheduled"
PAUSED = "paused"
NO_WORKER = "no_worker"
BUDGET_EXHAUSTED = "budget_exhausted"
BREAKER_OPEN = "breaker_open"
RATE_LIMITED = "rate_limited"
TENANT_CAP = "tenant_cap"
KEY_CAP = "key_cap"
QUEUE = "queue"
# In the order they are asked: a job held for several reasons shows the first.
REASONS: tuple[str, ...] = (
    SCHEDULED,
    PAUSED,
    NO_WORKER,
    BUDGET_EXHAUSTED,
    BREAKER_OPEN,
    RATE_LIMITED,
    TENANT_CAP,
    KEY_CAP,
    QUEUE,
)


@dataclasses.dataclass(frozen=True, slots=True)
class Waiting:
    """Why a job is not being worked on now: a reason of REASONS, a sentence for people, and
    when it should end by itself (Unix seconds; None: not by itself, or not known)."""

    reason: str
    detail: str
    until: float | None = None

    def view(self) -> dict[str, Any]:
        """As the API shows it (times in whole Unix seconds, rounded up: not before then)."""
        until = None if self.until is None else math.ceil(self.until)
        return {"reason": self.reason, "detail": self.detail, "until": until}


@dataclasses.dataclass(frozen=True, slots=True)
class PauseFact:
    """The pause that covers a job (the oldest, when several do)."""

    id: str
    reason: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class CapFact:
    """A cap at its limit: `running` slots held of `cap`."""

    running: int
    cap: int
    key: str | None = None  # the concurrency key, for a per-key cap


@dataclasses.dataclass(frozen=True, slots=True)
class KeyLimitFact:
    """A limit per concurrency key that holds the job's key: its name (`rpm_per_key`,
    `daily_token_budget_per_key`, `daily_cost_budget_usd_per_key`), its value, and when it
    lets the key go (Unix seconds)."""

    key: str
    limit: str
    value: float
    until: float


@dataclasses.dataclass(frozen=True, slots=True)
class WaitFacts:
    """What the claim would find for one queued job (or a group of alike jobs) now. Times are
    Unix seconds by the database's clock."""

    now: float
    run_at: float
    provider: str
    pause: PauseFact | None = None
    no_worker: str | None = None  # why no live process would claim it (None: one would)
    over_budget_until: float | None = None  # its tenant is over a daily budget until then
    key_over_budget: KeyLimitFact | None = None  # its key is over a daily budget per key
    breaker_open_until: float | None = None  # its provider's breaker lets no call through
    rate_limited_s: float = 0.0  # the shared rate limits admit it after this long
    provider_paused_s: float = 0.0  # its provider answered 429: claims wait this long
    key_rate_limited: KeyLimitFact | None = None  # its key's rpm_per_key admits it later
    tenant_cap: CapFact | None = None  # its tenant holds max_running slots
    key_cap: CapFact | None = None  # its concurrency key holds max_running_per_key slots
    queue_position: int | None = None  # its place in its tenant's line (None: not known)
    queue_position_exact: bool = True  # False: queue_position is a floor (at least that place)


def explain(facts: WaitFacts) -> Waiting | None:
    """The first reason the claim would pass the job over, or None when a worker may claim it
    now (nothing holds it and it is first in its tenant's line)."""
    for rule in _RULES:
        found = rule(facts)
        if found is not None:
            return found
    position = facts.queue_position
    if position is not None and position <= 1 and facts.queue_position_exact:
        return None  # first only when the walk saw the whole line ahead of it
    if position is None:
        return Waiting(QUEUE, "nothing holds it back: it waits for a worker's free slot")
    ahead = position - 1
    if not facts.queue_position_exact:  # the walk stopped at its bound: a floor
        if ahead == 0:
            return Waiting(QUEUE, "its tenant's jobs nearest ahead of it wait for their run_at")
        return Waiting(QUEUE, f"at least {ahead} jobs of its tenant are ahead of it in the queue")
    jobs = "1 job of its tenant is" if ahead == 1 else f"{ahead} jobs of its tenant are"
    return Waiting(QUEUE, f"{jobs} ahead of it in the queue")


def _scheduled(facts: WaitFacts) -> Waiting | None:
    if facts.run_at <= facts.now:
        return None
    return Waiting(SCHEDULED, "scheduled: it may not start before its run_at", facts.run_at)


def _paused(facts: WaitFacts) -> Waiting | None:
    pause = facts.pause
    if pause is None:
        return None
    why = f": {pause.reason}" if pause.reason else ""
    return Waiting(PAUSED, f"paused by an operator ({pause.id}){why}")


def _no_worker(facts: WaitFacts) -> Waiting | None:
    return None if facts.no_worker is None else Waiting(NO_WORKER, facts.no_worker)


def _budget(facts: WaitFacts) -> Waiting | None:
    if facts.over_budget_until is not None:
        detail = "its tenant is over its daily token or cost budget: claims resume at UTC midnight"
        return Waiting(BUDGET_EXHAUSTED, detail, facts.over_budget_until)
    held = facts.key_over_budget
    if held is None:
        return None
    detail = (
        f"concurrency key {held.key!r} has used its tenant's {held.limit} ({held.value:g}) "
        "today: its jobs are claimed again at UTC midnight"
    )
    return Waiting(BUDGET_EXHAUSTED, detail, held.until)


def _breaker(facts: WaitFacts) -> Waiting | None:
    if facts.breaker_open_until is None:
        return None
    detail = (
        f"the circuit breaker of provider {facts.provider} is open after repeated failures: "
        "no new calls until a probe succeeds"
    )
    return Waiting(BREAKER_OPEN, detail, facts.breaker_open_until)


def _rate_limited(facts: WaitFacts) -> Waiting | None:
    wait_s = max(facts.rate_limited_s, facts.provider_paused_s)
    held = facts.key_rate_limited
    if held is not None and held.until - facts.now >= wait_s:  # the key's wait is the longest
        detail = (
            f"concurrency key {held.key!r} is at its tenant's rpm_per_key ({held.value:g}): "
            f"its next job starts in ~{held.until - facts.now:.0f} s"
        )
        return Waiting(RATE_LIMITED, detail, held.until)
    if wait_s <= 0:
        return None
    if facts.rate_limited_s >= facts.provider_paused_s:
        detail = f"waiting for the shared rate limit of {facts.provider} (~{wait_s:.0f} s)"
    else:
        detail = f"provider {facts.provider} answered 429: claims wait ~{wait_s:.0f} s"
    return Waiting(RATE_LIMITED, detail, facts.now + wait_s)


def _tenant_cap(facts: WaitFacts) -> Waiting | None:
    cap = facts.tenant_cap
    if cap is None:
        return None
    detail = f"its tenant runs {cap.running} jobs, its max_running is {cap.cap}"
    return Waiting(TENANT_CAP, detail)


def _key_cap(facts: WaitFacts) -> Waiting | None:
    cap = facts.key_cap
    if cap is None:
        return None
    detail = (
        f"concurrency key {cap.key!r} runs {cap.running} jobs, "
        f"its tenant's max_running_per_key is {cap.cap}"
    )
    return Waiting(KEY_CAP, detail)


_RULES = (
    _scheduled,
    _paused,
    _no_worker,
    _budget,
    _breaker,
    _rate_limited,
    _tenant_cap,
    _key_cap,
)
