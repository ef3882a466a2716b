"""The webhook part of the Storage contract: endpoints, and the outbox as a delivery queue.

Deliveries are leased like jobs, visibility-timeout style: a claim pushes `next_attempt_at`
past the lease and sets a fresh `lease_token`, so a dispatcher that dies mid-send loses its
claim when the lease runs out and the row is delivered again under the same webhook-id
(at-least-once). Results are written fenced on the token.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from jobgate.storage.records import (
    Delivery,
    DeliveryAttempt,
    DeliveryOutcome,
    EndpointChanges,
    NewWebhookEndpoint,
    WebhookEndpoint,
)


class WebhookStore(Protocol):
    async def webhook_endpoint_create(
        self, *, endpoint: NewWebhookEndpoint, now: datetime | None = None
    ) -> WebhookEndpoint: ...

    async def webhook_endpoint_get(
        self, *, endpoint_id: str, tenant_id: str | None = None
    ) -> WebhookEndpoint | None:
        """None when missing or owned by another tenant (when tenant_id is given)."""
        ...

    async def webhook_endpoint_list(
        self, *, tenant_id: str, after: str | None = None, limit: int = 20
    ) -> list[WebhookEndpoint]:
        """Oldest first; `after` is the id of the last endpoint of the previous page."""
        ...

    async def webhook_endpoint_update(
        self,
        *,
        endpoint_id: str,
        tenant_id: str,
        changes: EndpointChanges,
        now: datetime | None = None,
    ) -> WebhookEndpoint | None:
        """Apply the fields that are set; enabling clears disabled_reason. None when not found."""
        ...

    async def webhook_endpoint_delete(
        self, *, endpoint_id: str, tenant_id: str, now: datetime | None = None
    ) -> bool:
        """Delete the endpoint and fail its pending deliveries. False when not found."""
        ...

    async def webhook_endpoint_rotate_secret(
        self,
        *,
        endpoint_id: str,
        tenant_id: str,
        secret: str,
        grace_s: float,
        now: datetime | None = None,
    ) -> WebhookEndpoint | None:
        """`secret` becomes current; the old one keeps signing for `grace_s` (none if 0)."""
        ...

    async def delivery_claim_due(
        self,
        *,
        limit: int,
        lease_s: float,
        busy: Sequence[str] = (),
        now: datetime | None = None,
    ) -> list[Delivery]:
        """Lease up to `limit` pending deliveries due at `now`, oldest due first, counting the
        attempt. Skips rows whose limit key (an endpoint id, or `url:` + a per-job URL) is in
        `busy`. Never hands one row to two concurrent callers (SKIP LOCKED on PostgreSQL)."""
        ...

    async def delivery_record(
        self, *, delivery: Delivery, outcome: DeliveryOutcome, now: datetime | None = None
    ) -> bool:
        """Record the attempt (always, if one was made) and, fenced on the lease token, the
        delivery's new state; disable the endpoint if the outcome says so. False when the lease
        was lost (someone else owns the row now; only the attempt was recorded)."""
        ...

    async def delivery_release(
        self, *, delivery: Delivery, delay_s: float = 0.0, now: datetime | None = None
    ) -> bool:
        """Give a claimed delivery back unsent (its attempt refunded), due after `delay_s`.
        Fenced on the lease token; False when the lease was lost."""
        ...

    async def delivery_recover(
        self, *, endpoint_id: str, tenant_id: str, since: datetime, now: datetime | None = None
    ) -> int:
        """Re-queue the endpoint's failed deliveries created at or after `since`, with a fresh
        attempt budget. Returns how many."""
        ...

    async def delivery_attempts_for_job(self, *, job_id: str) -> list[DeliveryAttempt]:
        """Every attempt at delivering a job's events, oldest first."""
        ...
