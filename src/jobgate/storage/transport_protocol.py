"""Storage for transports (issue 18): claiming the job a "job ready" message names, and the
publication ledger the relay and its sweep read (a part of the Storage contract)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from jobgate.domain.job import Job
from jobgate.storage.records import ClaimPolicy


@dataclasses.dataclass(frozen=True, slots=True)
class ClaimedById:
    """What a claim by id did with each id it was given."""

    claimed: list[Job]  # now running under a fresh lease of the caller
    deferred: list[str]  # still queued but not claimable now (a cap, a block, not yet due)
    # Every other id is gone for this message: running under another lease, terminal, missing.


@dataclasses.dataclass(frozen=True, slots=True)
class Publication:
    """A "job ready" message to publish: the job, and how often it was published for the same
    transition (1 the first time; more means the sweep found it unclaimed)."""

    job_id: str
    published_count: int


class TransportStore(Protocol):
    async def job_claim_by_id(
        self,
        *,
        worker_id: str,
        job_ids: Sequence[str],
        lease_ttl_s: float,
        providers: Sequence[str] | None = None,
        policy: ClaimPolicy | None = None,
        now: datetime | None = None,
    ) -> ClaimedById:
        """Move the named jobs that are claimable (queued, run_at <= now, before their start
        deadline, of `providers` when given) to running under a fresh lease token each, like
        job_claim: no tenant exceeds its cap in `policy` (nor a concurrency key its
        max_running_per_key) across every worker process, blocked
        tenants get nothing, and within a tenant over its cap the best (priority, run_at, id)
        go first. Never leases a job twice; an id that is not claimable is answered, never
        raised: deferred when still queued, else left out (a duplicate message is harmless)."""
        ...

    async def transport_publish_due(
        self,
        *,
        limit: int,
        republish_after_s: float,
        window: int | None = None,
        policy: ClaimPolicy | None = None,
        now: datetime | None = None,
        skip_providers: Sequence[str] | None = None,
    ) -> list[Publication]:
        """Record, and answer, up to `limit` ready jobs (queued, due, before their start
        deadline) that need a message: never published; published for an earlier transition
        (a retry, a reclaim, a redrive moved them since); or still unclaimed at their
        republish time. With `window`, no more than that many messages are outstanding
        (published for a queued job and not yet due again) after the call; the jobs are
        chosen by weighted fair share across tenants (`policy`'s weights; a tenant's running
        jobs and outstanding messages count against it), as job_claim chooses. Each is
        answered by one caller only (safe from several relays, which may together exceed
        the window by a batch); the caller publishes after this commits, so a crash in
        between delays a message by `republish_after_s` (the sweep) but never loses it.
        Jobs of `skip_providers` (the rate-limited ones, claimed from the table) are never
        answered."""
        ...

    async def transport_defer(
        self, *, job_ids: Sequence[str], delay_s: float, now: datetime | None = None
    ) -> None:
        """Publish these jobs again `delay_s` from now if they are still ready then (a
        message arrived while the job's tenant was at its cap). Idempotent."""
        ...
