"""The webhook store over either dialect: endpoints, the outbox as a leased delivery queue, and
the failing endpoints the alert gauges count (SignalStore). Claims are one statement on both
(SKIP LOCKED on PostgreSQL; one writer on SQLite)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from jobgate.storage.executor import SqlPart
from jobgate.storage.records import (
    Delivery,
    DeliveryAttempt,
    DeliveryOutcome,
    EndpointChanges,
    NewWebhookEndpoint,
    WebhookEndpoint,
)
from jobgate.storage.transaction_requests import DeliveryWrite, EndpointDeleteWrite


class WebhookQueries(SqlPart):
    async def webhook_endpoint_create(
        self, *, endpoint: NewWebhookEndpoint, now: datetime | None = None
    ) -> WebhookEndpoint:
        codec = self._sql.codec
        row = await self._sql.write_one(
            "webhook_endpoint_insert",
            id=endpoint.id,
            tenant_id=endpoint.tenant_id,
            url=endpoint.url,
            description=endpoint.description,
            event_types=codec.json(list(endpoint.event_types)),
            include_result=codec.flag(endpoint.include_result),
            disabled=codec.flag(endpoint.disabled),
            secret=endpoint.secret,
            progress_interval_s=float(endpoint.progress_interval_s),
            now=codec.now(now),
        )
        assert row is not None
        return self._decode.record(WebhookEndpoint, row)

    async def webhook_endpoint_get(
        self, *, endpoint_id: str, tenant_id: str | None = None
    ) -> WebhookEndpoint | None:
        if tenant_id is None:
            row = await self._sql.read_one("webhook_endpoint_get", id=endpoint_id)
        else:
            row = await self._sql.read_one(
                "webhook_endpoint_get_for_tenant", id=endpoint_id, tenant_id=tenant_id
            )
        return None if row is None else self._decode.record(WebhookEndpoint, row)

    async def webhook_endpoint_list(
        self, *, tenant_id: str, after: str | None = None, limit: int = 20
    ) -> list[WebhookEndpoint]:
        if (
            after is not None
            and await self.webhook_endpoint_get(endpoint_id=after, tenant_id=tenant_id) is None
        ):
            return []
        rows = await self._sql.read(
            "webhook_endpoint_list", tenant_id=tenant_id, after_id=after, limit=limit
        )
        return [self._decode.record(WebhookEndpoint, row) for row in rows]

    async def webhook_endpoint_update(
        self,
        *,
        endpoint_id: str,
        tenant_id: str,
        changes: EndpointChanges,
        now: datetime | None = None,
    ) -> WebhookEndpoint | None:
        codec = self._sql.codec
        event_types = None if changes.event_types is None else list(changes.event_types)
        row = await self._sql.write_one(
            "webhook_endpoint_update",
            id=endpoint_id,
            tenant_id=tenant_id,
            url=changes.url,
            description=changes.description,
            event_types=codec.json(event_types),
            include_result=codec.flag(changes.include_result),
            disabled=codec.flag(changes.disabled),
            progress_interval_s=(
                None if changes.progress_interval_s is None else float(changes.progress_interval_s)
            ),
            now=codec.now(now),
        )
        return None if row is None else self._decode.record(WebhookEndpoint, row)

    async def webhook_endpoint_delete(
        self, *, endpoint_id: str, tenant_id: str, now: datetime | None = None
    ) -> bool:
        """Deletes the endpoint and gives up its pending deliveries, in one transaction."""
        at = self._sql.codec.now(now)
        return await self._tx.endpoint_delete_write(EndpointDeleteWrite(endpoint_id, tenant_id, at))

    async def webhook_endpoint_rotate_secret(
        self,
        *,
        endpoint_id: str,
        tenant_id: str,
        secret: str,
        grace_s: float,
        now: datetime | None = None,
    ) -> WebhookEndpoint | None:
        row = await self._sql.write_one(
            "webhook_endpoint_rotate",
            id=endpoint_id,
            tenant_id=tenant_id,
            secret=secret,
            grace_s=float(grace_s),
            now=self._sql.codec.now(now),
        )
        return None if row is None else self._decode.record(WebhookEndpoint, row)

    async def outbox_progress_arm(self, *, job_id: str, now: datetime | None = None) -> int:
        rows = await self._sql.write(
            "outbox_progress_arm", job_id=job_id, now=self._sql.codec.now(now)
        )
        if rows:
            self.changes.outbox_available()
        return len(rows)

    async def outbox_batch_progress_arm(self, *, batch_id: str, now: datetime | None = None) -> int:
        rows = await self._sql.write(
            "outbox_batch_progress_arm", batch_id=batch_id, now=self._sql.codec.now(now)
        )
        if rows:
            self.changes.outbox_available()
        return len(rows)

    async def delivery_claim_due(
        self,
        *,
        limit: int,
        lease_s: float,
        busy: Sequence[str] = (),
        now: datetime | None = None,
    ) -> list[Delivery]:
        codec = self._sql.codec
        rows = await self._sql.write(
            "delivery_claim",
            limit=limit,
            lease_s=float(lease_s),
            busy=codec.json(list(busy)),
            now=codec.now(now),
        )
        claimed = [self._decode.delivery(row) for row in rows]
        # RETURNING promises no order (SQLite): oldest event first, as a dispatcher expects.
        return sorted(claimed, key=lambda item: (item.entry.created_at, item.entry.id))

    async def delivery_record(
        self, *, delivery: Delivery, outcome: DeliveryOutcome, now: datetime | None = None
    ) -> bool:
        codec = self._sql.codec
        entry = delivery.entry
        return await self._tx.delivery_write(
            DeliveryWrite(
                id=entry.id,
                token=delivery.lease_token,
                event_id=entry.event_id,
                tenant_id=entry.tenant_id,
                job_id=entry.job_id,
                job_created_at=codec.time(delivery.job_created_at),
                target=entry.target,
                attempt=entry.attempts,
                attempted=codec.flag(outcome.attempted),
                status_code=outcome.status_code,
                latency_ms=outcome.latency_ms,
                error=outcome.error,
                state=outcome.state,
                retry_in_s=float(outcome.retry_in_s),
                endpoint_id=entry.endpoint_id,
                disable_reason=outcome.disable_endpoint,
                now=codec.now(now),
            )
        )

    async def delivery_release(
        self, *, delivery: Delivery, delay_s: float = 0.0, now: datetime | None = None
    ) -> bool:
        row = await self._sql.write_one(
            "delivery_release",
            id=delivery.entry.id,
            job_id=delivery.entry.job_id,
            job_created_at=self._sql.codec.time(delivery.job_created_at),
            token=delivery.lease_token,
            delay_s=float(delay_s),
            now=self._sql.codec.now(now),
        )
        if row is not None:
            self.changes.outbox_available()
        return row is not None

    async def delivery_recover(
        self, *, endpoint_id: str, tenant_id: str, since: datetime, now: datetime | None = None
    ) -> int:
        codec = self._sql.codec
        recovered = await self._sql.write_count(
            "delivery_recover",
            endpoint_id=endpoint_id,
            tenant_id=tenant_id,
            since=codec.time(since),
            now=codec.now(now),
        )
        if recovered:
            self.changes.outbox_available()
        return recovered

    async def delivery_attempts_for_job(self, *, job_id: str) -> list[DeliveryAttempt]:
        rows = await self._sql.read("delivery_attempts_for_job", job_id=job_id)
        return [self._decode.record(DeliveryAttempt, row) for row in rows]

    async def webhook_endpoints_failing(self, *, min_attempts: int) -> dict[str, int]:
        rows = await self._sql.read("webhook_endpoints_failing", min_attempts=min_attempts)
        return {row["tenant_id"]: int(row["failing"]) for row in rows}
