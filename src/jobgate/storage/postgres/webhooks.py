"""The webhook store on PostgreSQL (a mixin of PostgresStorage): endpoints and leased deliveries.
Each method is one statement; claims use FOR UPDATE SKIP LOCKED, so any number of dispatchers
can share the outbox."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from jobgate.storage.records import (
    Delivery,
    DeliveryAttempt,
    DeliveryOutcome,
    EndpointChanges,
    NewWebhookEndpoint,
    WebhookEndpoint,
)
from jobgate.storage.rows import WebhookRowDecoder

if TYPE_CHECKING:
    import asyncpg

    from jobgate.storage.changes import ChangeHub


def _identity(value: Any) -> Any:
    return value


_decode = WebhookRowDecoder(time=_identity, json=_identity)


class PostgresWebhookStore:
    if TYPE_CHECKING:
        changes: ChangeHub

        async def _fetch(self, query_name: str, /, **params: Any) -> list[asyncpg.Record]: ...

        async def _fetchrow(self, query_name: str, /, **params: Any) -> asyncpg.Record | None: ...

    async def webhook_endpoint_create(
        self, *, endpoint: NewWebhookEndpoint, now: datetime | None = None
    ) -> WebhookEndpoint:
        row = await self._fetchrow(
            "webhook_endpoint_insert",
            id=endpoint.id,
            tenant_id=endpoint.tenant_id,
            url=endpoint.url,
            description=endpoint.description,
            event_types=list(endpoint.event_types),
            include_result=endpoint.include_result,
            disabled=endpoint.disabled,
            secret=endpoint.secret,
            now=now,
        )
        assert row is not None
        return _decode.endpoint(row)

    async def webhook_endpoint_get(
        self, *, endpoint_id: str, tenant_id: str | None = None
    ) -> WebhookEndpoint | None:
        if tenant_id is None:
            row = await self._fetchrow("webhook_endpoint_get", id=endpoint_id)
        else:
            row = await self._fetchrow(
                "webhook_endpoint_get_for_tenant", id=endpoint_id, tenant_id=tenant_id
            )
        return None if row is None else _decode.endpoint(row)

    async def webhook_endpoint_list(
        self, *, tenant_id: str, after: str | None = None, limit: int = 20
    ) -> list[WebhookEndpoint]:
        if (
            after is not None
            and await self.webhook_endpoint_get(endpoint_id=after, tenant_id=tenant_id) is None
        ):
            return []
        rows = await self._fetch(
            "webhook_endpoint_list", tenant_id=tenant_id, after_id=after, limit=limit
        )
        return [_decode.endpoint(row) for row in rows]

    async def webhook_endpoint_update(
        self,
        *,
        endpoint_id: str,
        tenant_id: str,
        changes: EndpointChanges,
        now: datetime | None = None,
    ) -> WebhookEndpoint | None:
        row = await self._fetchrow(
            "webhook_endpoint_update",
            id=endpoint_id,
            tenant_id=tenant_id,
            url=changes.url,
            description=changes.description,
            event_types=None if changes.event_types is None else list(changes.event_types),
            include_result=changes.include_result,
            disabled=changes.disabled,
            now=now,
        )
        return None if row is None else _decode.endpoint(row)

    async def webhook_endpoint_delete(
        self, *, endpoint_id: str, tenant_id: str, now: datetime | None = None
    ) -> bool:
        row = await self._fetchrow(
            "webhook_endpoint_delete", id=endpoint_id, tenant_id=tenant_id, now=now
        )
        return row is not None

    async def webhook_endpoint_rotate_secret(
        self,
        *,
        endpoint_id: str,
        tenant_id: str,
        secret: str,
        grace_s: float,
        now: datetime | None = None,
    ) -> WebhookEndpoint | None:
        row = await self._fetchrow(
            "webhook_endpoint_rotate",
            id=endpoint_id,
            tenant_id=tenant_id,
            secret=secret,
            grace_s=float(grace_s),
            now=now,
        )
        return None if row is None else _decode.endpoint(row)

    async def delivery_claim_due(
        self,
        *,
        limit: int,
        lease_s: float,
        busy: Sequence[str] = (),
        now: datetime | None = None,
    ) -> list[Delivery]:
        rows = await self._fetch(
            "delivery_claim", limit=limit, lease_s=float(lease_s), busy=list(busy), now=now
        )
        return [_decode.delivery(row) for row in rows]

    async def delivery_record(
        self, *, delivery: Delivery, outcome: DeliveryOutcome, now: datetime | None = None
    ) -> bool:
        entry = delivery.entry
        row = await self._fetchrow(
            "delivery_record",
            id=entry.id,
            token=delivery.lease_token,
            event_id=entry.event_id,
            tenant_id=entry.tenant_id,
            job_id=entry.job_id,
            target=entry.target,
            attempt=entry.attempts,
            attempted=outcome.attempted,
            status_code=outcome.status_code,
            latency_ms=outcome.latency_ms,
            error=outcome.error,
            state=outcome.state,
            retry_in_s=float(outcome.retry_in_s),
            endpoint_id=entry.endpoint_id,
            disable_reason=outcome.disable_endpoint,
            now=now,
        )
        return row is not None

    async def delivery_release(
        self, *, delivery: Delivery, delay_s: float = 0.0, now: datetime | None = None
    ) -> bool:
        row = await self._fetchrow(
            "delivery_release",
            id=delivery.entry.id,
            token=delivery.lease_token,
            delay_s=float(delay_s),
            now=now,
        )
        if row is not None:
            self.changes.outbox_available()
        return row is not None

    async def delivery_recover(
        self, *, endpoint_id: str, tenant_id: str, since: datetime, now: datetime | None = None
    ) -> int:
        rows = await self._fetch(
            "delivery_recover", endpoint_id=endpoint_id, tenant_id=tenant_id, since=since, now=now
        )
        if rows:
            self.changes.outbox_available()
        return len(rows)

    async def delivery_attempts_for_job(self, *, job_id: str) -> list[DeliveryAttempt]:
        rows = await self._fetch("delivery_attempts_for_job", job_id=job_id)
        return [_decode.attempt(row) for row in rows]
