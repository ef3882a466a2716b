"""The worker's part in background mode: create the job at the provider under the lease,
record the provider's id with a fenced write, and give the worker slot back. From then on
the job is the reconciler's.

Each phase of a create is recorded on the job (`creation_outcome`):
- `sending`: written (fenced) just before the create leaves. A job found in this phase by the
  next worker means the previous one died mid-create: the provider may hold the job;
- `accepted`: the provider answered with its id (known-running);
- `unknown`: the request went out and no answer came back (timeout, dropped connection);
- `rejected`: the provider answered with an error (nothing was created);
- `not_sent`: the request never left (connection refused, connect timeout).
A `sending` or `unknown` job is created again only when the provider deduplicates by our
idempotency key, or when JOBGATE_UNKNOWN_OUTCOME=retry says to accept the risk.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging

from jobgate import errors, failpoints
from jobgate.clock import Clock
from jobgate.config import Settings
from jobgate.domain import verdicts
from jobgate.domain.job import Job, Lease
from jobgate.domain.verdicts import Finish
from jobgate.providers.background import BackgroundProvider, ProviderJobRef, Snapshot
from jobgate.providers.base import ProviderCall
from jobgate.providers.registry import ProviderRegistry
from jobgate.roles.call_verdicts import CallVerdicts
from jobgate.services import readback
from jobgate.storage import protocol

log = logging.getLogger(__name__)

SENDING = "sending"
ACCEPTED = "accepted"
UNKNOWN = "unknown"
REJECTED = "rejected"
NOT_SENT = "not_sent"


@dataclasses.dataclass(frozen=True, slots=True)
class Accepted:
    """The provider took the job; the worker records its id and lets go."""

    snapshot: Snapshot
    provider: BackgroundProvider


class BackgroundStarter:
    def __init__(
        self,
        *,
        storage: protocol.WorkerStorage,
        providers: ProviderRegistry,
        settings: Settings,
        clock: Clock,
        actor: str,
        verdicts: CallVerdicts,
    ) -> None:
        self._storage = storage
        self._providers = providers
        self._settings = settings
        self._clock = clock
        self._actor = actor
        self._verdicts = verdicts  # the worker's: the same retry backoff for a failed create

    async def start(
        self, job: Job, lease: Lease, call: ProviderCall, provider: BackgroundProvider
    ) -> Finish | Accepted | None:
        """Create the job at the provider. None when the lease was lost before sending.

        Not interrupted by a cancel request: aborting a create half-way would only turn a
        known outcome into an unknown one. The reconciler cancels at the provider instead."""
        if (
            job.creation_outcome == SENDING
            and not provider.idempotent_creates
            and self._settings.unknown_outcome == "fail"
        ):
            return verdicts.died_mid_create(job, actor=self._actor)
        if not await self._mark_sending(job, lease):
            return None
        failpoints.hit("before_provider_create")
        try:
            snapshot = await provider.create(call)
        except errors.ProviderError as exc:
            self._providers.gates.record(job.provider, job.id, exc)
            finish = self._verdicts.failed(job, exc)
            return dataclasses.replace(finish, creation_outcome=_outcome_of(exc))
        except Exception as exc:  # a bug, possibly after the provider accepted: unknown
            log.exception("background create raised unexpectedly", extra={"job_id": job.id})
            unknown = errors.ProviderOutcomeUnknown(
                f"internal error while creating the job ({type(exc).__name__})",
                safe_to_retry=provider.idempotent_creates,
            )
            finish = self._verdicts.failed(job, unknown)
            return dataclasses.replace(finish, creation_outcome=UNKNOWN)
        failpoints.hit("after_provider_create")
        self._providers.gates.record(job.provider, job.id, None)
        if snapshot.terminal and not snapshot.needs_result:
            # Finished in the create's answer (a server that ignores `background`, which may
            # not even keep the response for a later retrieve): settle it under the lease.
            return self._finished_at_once(job, snapshot)
        return Accepted(snapshot, provider)

    async def _mark_sending(self, job: Job, lease: Lease) -> bool:
        """Record (fenced) that the create is about to leave. The write is idempotent under
        the lease, so an unknown outcome (a reply lost after its commit) is settled by
        writing again: had the first committed, the job would otherwise sit in `sending`
        although nothing was sent, and be failed as an unknown create later."""
        delay_s = 0.05
        for _ in range(3):
            try:
                await self._storage.job_provider_submitting(lease=lease)
                return True
            except errors.LeaseLost:
                return False
            except errors.StorageUnavailable:
                await self._clock.sleep(delay_s)
                delay_s *= 4
            except errors.StorageError:
                break
        # Nothing was sent. The lease runs out and the reaper gives the job back.
        log.warning("could not mark the create as sending", extra={"job_id": job.id})
        return False

    def _finished_at_once(self, job: Job, snapshot: Snapshot) -> Finish:
        if snapshot.result is not None:
            finish = verdicts.succeeded(
                job,
                actor=self._actor,
                result=snapshot.result.body,
                usage=snapshot.result.usage.as_dict(),
                request_id=snapshot.result.request_id,
            )
        else:
            error = snapshot.error or errors.ProviderFatal(
                f"the provider answered the create with status {snapshot.status}",
                code=f"response_{snapshot.status}",
            )
            finish = self._verdicts.failed(job, error)
        return dataclasses.replace(finish, creation_outcome=ACCEPTED)

    async def accept(self, job: Job, lease: Lease, accepted: Accepted) -> Job | None:
        """Record the provider's id under the lease and release it; keep trying through a
        storage outage for as long as the lease may hold. None when the lease was lost."""
        snapshot = accepted.snapshot
        config = self._providers.config(job.provider)
        first_check_s = 0.0 if snapshot.terminal else config.reconcile_after_s  # results to fetch
        give_up_at = self._clock.monotonic() + self._settings.lease_ttl_s
        delay_s = 0.05
        while True:
            try:
                written = await self._storage.job_background_accept(
                    lease=lease,
                    provider_job_id=snapshot.provider_job_id,
                    provider_status=snapshot.status,
                    reconcile_in_s=first_check_s,
                )
                break
            except errors.LeaseLost:
                # The fence refused this write; an earlier attempt whose reply was lost may
                # have committed it. Read back before treating the provider job as an orphan.
                try:
                    mine = await readback.accepted(
                        self._storage, job.id, provider_job_id=snapshot.provider_job_id
                    )
                except errors.StorageError:
                    log.warning(
                        "could not tell whether the provider's id was recorded",
                        extra={"job_id": job.id, "provider_job_id": snapshot.provider_job_id},
                    )
                    return None  # unknown: never cancel what may be the job's own provider job
                if mine is None:
                    await self._orphaned(job, accepted)
                    return None
                written = mine
                break
            except errors.StorageUnavailable:
                if self._clock.monotonic() >= give_up_at:
                    log.warning(
                        "could not record the provider's id before the lease ran out",
                        extra={"job_id": job.id, "provider_job_id": snapshot.provider_job_id},
                    )
                    return None
                await self._clock.sleep(delay_s)
                delay_s = min(delay_s * 2, 2.0)
        log.info(
            "job accepted by the provider",
            extra={
                "job_id": job.id,
                "provider": job.provider,
                "provider_job_id": snapshot.provider_job_id,
                "phase": written.phase,
                "worker_id": self._actor,
            },
        )
        return written

    async def _orphaned(self, job: Job, accepted: Accepted) -> None:
        """Our lease was reclaimed while we created the job: whoever holds it now creates
        its own. Without idempotent creates ours is an orphan the provider would bill: cancel
        it (best effort)."""
        provider_job_id = accepted.snapshot.provider_job_id
        log.warning(
            "lease lost after the provider accepted the job",
            extra={"job_id": job.id, "provider_job_id": provider_job_id},
        )
        if accepted.provider.idempotent_creates:
            return  # the new holder's create answers this same provider job
        ref = ProviderJobRef(job.id, provider_job_id, job.endpoint, job.model)
        with contextlib.suppress(errors.ProviderError, asyncio.TimeoutError):
            async with asyncio.timeout(30):
                await accepted.provider.cancel(ref)


def _outcome_of(exc: errors.ProviderError) -> str:
    if isinstance(exc, errors.ProviderOutcomeUnknown):
        return UNKNOWN
    if exc.status_code is None and exc.code == "connection_error":
        return NOT_SENT
    return REJECTED
