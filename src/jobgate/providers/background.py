"""Background mode: a provider that runs a job on its side (OpenAI Responses with
`background: true`, Anthropic Message Batches). The worker creates it and records the
provider's id; from then on only the reconciler asks the provider about it.

Statuses are normalised to one vocabulary whatever the provider calls them.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol, runtime_checkable

from jobgate import errors
from jobgate.providers.base import JSONObject, ProviderCall, ProviderResult


class Status:
    QUEUED = "queued"
    IN_PROGRESS = "in_progress"
    CANCELLING = "cancelling"  # a cancel was accepted and is taking effect
    COMPLETED = "completed"
    INCOMPLETE = "incomplete"  # finished early (e.g. max output tokens): still the real result
    FAILED = "failed"
    CANCELLED = "cancelled"


TERMINAL = frozenset({Status.COMPLETED, Status.INCOMPLETE, Status.FAILED, Status.CANCELLED})


@dataclasses.dataclass(frozen=True, slots=True)
class ProviderJobRef:
    """What the reconciler knows about a job running at a provider."""

    job_id: str
    provider_job_id: str
    endpoint: str
    model: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class Snapshot:
    """The provider's answer about one of its jobs: authoritative."""

    provider_job_id: str
    status: str
    body: JSONObject  # the provider's object as it answered
    result: ProviderResult | None = None  # for a terminal status that carries its result
    error: errors.ProviderError | None = None  # for `failed`: classified like a call's error
    # A terminal snapshot whose result must still be fetched (a batch's results file).
    needs_result: bool = False

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL


@dataclasses.dataclass(frozen=True, slots=True)
class ProviderEvent:
    """What an inbound provider webhook says, once verified and parsed."""

    event_type: str
    provider_job_id: str


@runtime_checkable
class BackgroundProvider(Protocol):
    name: str
    # The provider really deduplicates creates by the Idempotency-Key (the job id); the
    # real OpenAI and Anthropic APIs do not, so their adapters have it from the configuration
    # (default false).
    idempotent_creates: bool

    def runs_in_background(self, endpoint: str) -> bool:
        """Whether jobs for `endpoint` run in the provider's background mode."""
        ...

    async def create(self, call: ProviderCall) -> Snapshot:
        """Create the job at the provider (the job id as its idempotency key and metadata).
        Raises classified errors.ProviderError; ProviderOutcomeUnknown when the request was
        sent and no answer came back. Never retries by itself."""
        ...

    async def retrieve(self, ref: ProviderJobRef) -> Snapshot:
        """Ask the provider where the job stands. Read-only: safe to repeat."""
        ...

    async def fetch_result(self, ref: ProviderJobRef, snapshot: Snapshot) -> ProviderResult:
        """The result of a terminal snapshot with `needs_result` (e.g. a batch's results)."""
        ...

    async def cancel(self, ref: ProviderJobRef) -> Snapshot:
        """Ask the provider to cancel; answers the job as the provider then reports it (already
        finished: too late). Raises errors.ProviderCancelUnsupported when it cannot."""
        ...

    def webhook_event(self, payload: JSONObject) -> ProviderEvent | None:
        """Parse a verified webhook payload; None for an event about something else."""
        ...


def background_for(provider: object, endpoint: str) -> BackgroundProvider | None:
    """The provider as a BackgroundProvider when it runs `endpoint` in background mode.

    Asked once per job: the endpoint check goes first because isinstance() against a
    runtime-checkable protocol walks all its members (about 5% of a draining worker's CPU)."""
    runs_in_background = getattr(provider, "runs_in_background", None)
    if not callable(runs_in_background) or not runs_in_background(endpoint):
        return None
    return provider if isinstance(provider, BackgroundProvider) else None
