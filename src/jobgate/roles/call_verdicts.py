"""A worker's verdicts on its provider calls: the call a job makes, and the Finish its outcome
(an answer, a provider error, an adapter's bug, a stop) gets, feeding the provider's breaker."""

from __future__ import annotations

import logging
import random

from jobgate import errors
from jobgate.config import Settings
from jobgate.domain import verdicts
from jobgate.domain.backoff import full_jitter_s, jittered_wait_s
from jobgate.domain.job import Job
from jobgate.domain.verdicts import Finish
from jobgate.providers import streaming
from jobgate.providers.base import ProviderCall, ProviderResult
from jobgate.providers.registry import ProviderRegistry
from jobgate.roles import output_stream
from jobgate.roles.lease_keeper import ABORT_CANCEL, ABORT_OUTPUT_NOT_STORED, ABORT_SHUTDOWN

log = logging.getLogger("jobgate.roles.worker")


def call_of(job: Job, *, stall_timeout_s: float | None = None) -> ProviderCall:
    """What the job's provider is asked: the same idempotency key on every re-send; a
    streamed answer silent for the job's stall timeout (else `stall_timeout_s`) has stalled."""
    return ProviderCall(
        job_id=job.id,
        tenant_id=job.tenant_id,
        endpoint=job.endpoint,
        body=output_stream.provider_body(job),
        model=job.model,
        attempt=job.attempt,
        run_count=job.run_count,
        idempotency_key=job.provider_idempotency_key,
        stall_timeout_s=None
        if stall_timeout_s is None
        else streaming.stall_timeout_s(job.request, stall_timeout_s),
    )


class CallVerdicts:
    """The verdicts of one worker (`actor`), with its retry backoff."""

    def __init__(
        self,
        *,
        providers: ProviderRegistry,
        settings: Settings,
        actor: str,
        rng: random.Random | None,
    ) -> None:
        self._providers = providers
        self._settings = settings
        self._actor = actor
        self._rng = rng

    def aborted(self, job: Job, abort_reason: str | None) -> Finish | None:
        """The verdict of a call stopped for `abort_reason` (None: write nothing)."""
        if abort_reason == ABORT_CANCEL:
            return verdicts.cancelled(job, actor=self._actor)
        if abort_reason == ABORT_SHUTDOWN:
            return verdicts.released(job, actor=self._actor)
        if abort_reason == ABORT_OUTPUT_NOT_STORED:
            return verdicts.output_not_stored(job, actor=self._actor, retry_delay=self.retry_delay)
        return None  # the lease is lost or about to be: whoever holds it owns the job

    def of_outcome(self, job: Job, outcome: ProviderResult | BaseException) -> Finish:
        if isinstance(outcome, errors.ProviderError):
            self._providers.gates.record(job.provider, job.id, outcome)  # feeds the breaker
            return self.failed(job, outcome)
        if isinstance(outcome, BaseException):  # a bug in an adapter
            log.error(
                "provider call raised unexpectedly",
                exc_info=outcome,
                extra={"job_id": job.id, "provider": job.provider},
            )
            return verdicts.internal_error(
                job,
                outcome,
                actor=self._actor,
                retry_delay=self.retry_delay,
                unknown_outcome=self._settings.unknown_outcome,
            )
        self._providers.gates.record(job.provider, job.id, None)
        return verdicts.succeeded(
            job,
            actor=self._actor,
            result=outcome.body,
            usage=outcome.usage.as_dict(),
            request_id=outcome.request_id,
        )

    def failed(self, job: Job, exc: errors.ProviderError) -> Finish:
        return verdicts.failed(
            job,
            exc,
            actor=self._actor,
            retry_delay=self.retry_delay,
            unknown_outcome=self._settings.unknown_outcome,
            rate_limit_wait=self.rate_limit_wait,
        )

    def rate_limit_wait(self, wait_s: float) -> float:
        return jittered_wait_s(wait_s, rng=self._rng)

    def retry_delay(self, attempt: int) -> float:
        return full_jitter_s(
            attempt,
            base_s=self._settings.retry_base_s,
            cap_s=self._settings.retry_max_s,
            rng=self._rng,
        )
