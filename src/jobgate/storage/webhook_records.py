"""Plain records of the webhook store: endpoints, claimed deliveries and their attempts."""

from __future__ import annotations

import dataclasses
from datetime import datetime

from jobgate.storage.records import OutboxEntry

ENDPOINT_ACTIVE = "active"
ENDPOINT_DISABLED = "disabled"
ENDPOINT_MISSING = "missing"  # deleted after the delivery was written


@dataclasses.dataclass(frozen=True, slots=True)
class WebhookEndpoint:
    id: str
    tenant_id: str
    url: str
    description: str
    event_types: tuple[str, ...]  # empty: every terminal event
    include_result: bool
    disabled: bool
    disabled_reason: str | None
    secret: str
    previous_secret: str | None  # still signs until previous_secret_expires_at
    previous_secret_expires_at: datetime | None
    created_at: datetime
    updated_at: datetime


@dataclasses.dataclass(frozen=True, slots=True)
class NewWebhookEndpoint:
    id: str
    tenant_id: str
    url: str
    secret: str
    description: str = ""
    event_types: tuple[str, ...] = ()
    include_result: bool = False
    disabled: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class EndpointChanges:
    """A partial update; None leaves a field as it is."""

    url: str | None = None
    description: str | None = None
    event_types: tuple[str, ...] | None = None
    include_result: bool | None = None
    disabled: bool | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Delivery:
    """An outbox row claimed under a lease, with what sending it needs."""

    entry: OutboxEntry  # attempts already counts this attempt
    lease_token: str
    url: str | None  # None when the endpoint is gone
    secrets: tuple[str, ...]  # the current secret, then the previous one during its grace
    include_result: bool
    endpoint_state: str  # ENDPOINT_ACTIVE | ENDPOINT_DISABLED | ENDPOINT_MISSING

    @property
    def attempt(self) -> int:
        return self.entry.attempts

    @property
    def limit_key(self) -> str:
        """What the per-endpoint concurrency cap counts: an endpoint, or a per-job URL."""
        return self.entry.endpoint_id or f"url:{self.entry.url or ''}"


@dataclasses.dataclass(frozen=True, slots=True)
class DeliveryOutcome:
    """The result of one claimed delivery, recorded fenced on its lease token."""

    state: str  # pending (retry at retry_in_s) | succeeded | failed
    attempted: bool  # False: nothing was sent (endpoint disabled or deleted); no attempt row
    status_code: int | None = None
    latency_ms: int = 0
    error: str | None = None
    retry_in_s: float = 0.0
    disable_endpoint: str | None = None  # a reason: disable the endpoint (410 Gone)


@dataclasses.dataclass(frozen=True, slots=True)
class DeliveryAttempt:
    id: str
    outbox_id: str
    event_id: str
    job_id: str
    target: str
    attempt: int
    status_code: int | None
    latency_ms: int
    error: str | None
    succeeded: bool
    created_at: datetime
