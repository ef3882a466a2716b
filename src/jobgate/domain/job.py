"""The job record and its event log entries, as the storage layer returns them."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

from jobgate.domain import frozen
from jobgate.domain.states import JobState

JSONObject = dict[str, Any]


class Phase:
    """Sub-state of a running job (a field, not a state)."""

    SUBMITTING = "submitting"
    AWAITING_PROVIDER = "awaiting_provider"


class CancelOutcome:
    """How a cancellation ended, recorded on the job."""

    NOT_STARTED = "not_started"  # cancelled while queued: the provider never saw it
    INTERRUPTED = "interrupted"  # the worker aborted its in-flight call
    AT_PROVIDER = "at_provider"  # the provider confirmed the cancellation
    TOO_LATE = "too_late"  # the provider had already finished; the job keeps its result
    NOT_SUPPORTED = "not_supported"  # cancelled locally; the provider's answer will be discarded


@frozen.record  # built for every job read, claimed or stored
class Job:
    id: str
    tenant_id: str
    state: JobState
    api: str
    provider: str
    endpoint: str
    model: str | None
    request: JSONObject | None
    metadata: JSONObject
    webhook: JSONObject | None
    result: JSONObject | None
    error: JSONObject | None
    usage: JSONObject | None
    priority: int
    attempt: int
    max_attempts: int
    run_count: int
    lost_count: int
    run_at: datetime
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    completed_at: datetime | None
    cancel_requested_at: datetime | None
    expires_at: datetime | None
    execution_timeout_s: float | None
    deadline_at: datetime | None
    lease_owner: str | None
    lease_token: str | None
    lease_expires_at: datetime | None
    phase: str | None
    provider_job_id: str | None
    creation_outcome: str | None
    cancel_outcome: str | None
    reconcile_at: datetime | None
    dead_lettered: bool
    purged_at: datetime | None
    event_seq: int
    # How many provider jobs of this job ended and were followed by a new attempt.
    provider_generation: int = 0
    # Columns whose stored value could not be read as what they should hold (a row written by
    # hand or before the edge checked it): the worker fails such a job as `poison_job`.
    damaged: tuple[str, ...] = ()
    concurrency_key: str | None = None
    model_route: str | None = None  # the route alias the job was submitted for
    reconciled_at: datetime | None = None  # when a reconciler last asked its provider
    progress: float | None = None  # the fraction done its provider last reported
    # The provider's `x-request-id` / `request-id` of the attempt that succeeded (a failed
    # attempt's is in error.request_id).
    provider_request_id: str | None = None

    @property
    def terminal(self) -> bool:
        return self.state.terminal

    @property
    def provider_idempotency_key(self) -> str:
        """The Idempotency-Key of this attempt's create: the job id, the same on every re-send
        of one provider job (so a provider that deduplicates answers with the original), and
        suffixed by the generation once a provider job of this job has ended and a new one is
        wanted (else that provider would answer the new attempt with the ended job)."""
        if self.provider_generation == 0:
            return self.id
        return f"{self.id}:{self.provider_generation}"


# A member read from the enum class is a lookup through its metaclass: queued reads it once.
_QUEUED = JobState.QUEUED


@frozen.record  # built once per submitted job
class NewJob:
    """What a submit stores; the storage adds state, times and counters."""

    id: str
    tenant_id: str
    provider: str
    endpoint: str
    model: str | None
    request: JSONObject
    metadata: JSONObject
    webhook: JSONObject | None = None
    api: str = "jobs"
    priority: int = 5
    max_attempts: int = 3
    start_timeout_s: float | None = None
    execution_timeout_s: float | None = None
    # Scheduling: not claimable before `run_at` (absolute) or `delay_s` after the insert, by
    # the database's clock; a time in the past means now. The start deadline counts from then.
    run_at: datetime | None = None
    delay_s: float = 0.0
    concurrency_key: str | None = None  # held by the tenant's limits per key
    model_route: str | None = None  # the `[routes."ALIAS"]` submitted for, if any

    def queued(
        self,
        *,
        created_at: datetime,
        run_at: datetime,
        expires_at: datetime | None,
        damaged: tuple[str, ...] = (),
    ) -> Job:
        """This job as its insert at `created_at` stored it (queued, its first event written,
        never run), given the times the database computed: what `job_get` then reads, built
        without reading the row back. The JSON values are this job's own objects."""
        # By position, in Job's field order: keywords would cost a bulk item more than the
        # rest of building it.
        return Job(
            self.id,
            self.tenant_id,
            _QUEUED,  # state
            self.api,
            self.provider,
            self.endpoint,
            self.model,
            self.request,
            self.metadata,
            self.webhook,
            None,  # result
            None,  # error
            None,  # usage
            self.priority,
            0,  # attempt
            self.max_attempts,
            0,  # run_count
            0,  # lost_count
            run_at,
            created_at,
            created_at,  # updated_at
            None,  # started_at
            None,  # completed_at
            None,  # cancel_requested_at
            expires_at,
            self.execution_timeout_s,
            None,  # deadline_at
            None,  # lease_owner
            None,  # lease_token
            None,  # lease_expires_at
            None,  # phase
            None,  # provider_job_id
            None,  # creation_outcome
            None,  # cancel_outcome
            None,  # reconcile_at
            False,  # dead_lettered
            None,  # purged_at
            1,  # event_seq
            0,  # provider_generation
            damaged,
            self.concurrency_key,
            self.model_route,
            None,  # reconciled_at
            None,  # progress
            None,  # provider_request_id
        )


@dataclasses.dataclass(frozen=True, slots=True)
class JobEvent:
    job_id: str
    seq: int
    from_state: JobState | None
    to_state: JobState
    actor: str
    reason: str | None
    applied: bool
    created_at: datetime


@frozen.record  # one per claimed job
class Lease:
    """Proof that a worker holds a running job; every write it makes is fenced on the token."""

    job_id: str
    token: str
