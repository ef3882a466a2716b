"""Webhook endpoints as the API manages them: register (SSRF-checked), update, rotate secrets,
send a test ping, recover failed deliveries, and list a job's deliveries."""

from __future__ import annotations

import builtins
import dataclasses
import logging
import secrets
import ssl
from collections.abc import Sequence
from datetime import datetime

import orjson

from jobgate import errors
from jobgate.clock import Clock
from jobgate.config import Settings
from jobgate.domain import events as domain_events
from jobgate.domain import webhooks
from jobgate.ids import IdGenerator
from jobgate.services.tenants import new_webhook_secret
from jobgate.services.webhook_guard import UrlGuard
from jobgate.services.webhook_transport import WebhookSender
from jobgate.storage.protocol import Storage
from jobgate.storage.records import (
    DeliveryAttempt,
    EndpointChanges,
    NewWebhookEndpoint,
    OutboxEntry,
    WebhookEndpoint,
)
from jobgate.wire import standard_webhooks

log = logging.getLogger(__name__)

DEFAULT_ROTATION_GRACE_S = 24 * 3600
MAX_ROTATION_GRACE_S = 7 * 24 * 3600
MAX_EVENT_TYPES = 16


@dataclasses.dataclass(frozen=True, slots=True)
class PingResult:
    event_id: str
    status_code: int | None
    latency_ms: int
    error: str | None

    @property
    def succeeded(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


@dataclasses.dataclass(frozen=True, slots=True)
class JobDelivery:
    """One outbox row of a job and every attempt made at it."""

    entry: OutboxEntry
    attempts: list[DeliveryAttempt]


def check_event_types(event_types: Sequence[str], *, param: str = "event_types") -> tuple[str, ...]:
    unknown = [t for t in event_types if t not in domain_events.ENDPOINT_EVENT_TYPES]
    if unknown:
        raise errors.InvalidRequest(f"unknown webhook event type {unknown[0]!r}", param=param)
    if len(event_types) > MAX_EVENT_TYPES:
        raise errors.InvalidRequest(f"at most {MAX_EVENT_TYPES} event types", param=param)
    return tuple(dict.fromkeys(event_types))


def check_progress_interval(value: float, *, param: str = "progress_interval_s") -> float:
    low, high = webhooks.PROGRESS_INTERVAL_RANGE_S
    if not low <= value <= high:
        raise errors.InvalidRequest(f"{param} must be between {low:g} and {high:g}", param=param)
    return float(value)


class WebhookService:
    def __init__(
        self,
        *,
        storage: Storage,
        settings: Settings,
        clock: Clock,
        ids: IdGenerator,
        guard: UrlGuard | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.storage = storage
        self.settings = settings
        self.clock = clock
        self.ids = ids
        self.guard = guard or UrlGuard.from_settings(settings)
        self._ssl_context = ssl_context

    # -- endpoints ------------------------------------------------------------------------

    async def create(
        self,
        *,
        tenant_id: str,
        url: str,
        event_types: Sequence[str] = (),
        description: str = "",
        include_result: bool = False,
        disabled: bool = False,
        progress_interval_s: float = webhooks.DEFAULT_PROGRESS_INTERVAL_S,
    ) -> WebhookEndpoint:
        """Register an endpoint after the SSRF guard resolved and vetted its URL. The answer
        carries the secret; it is not shown again."""
        types = check_event_types(event_types)
        interval_s = check_progress_interval(progress_interval_s)
        await self.guard.resolve(url)
        endpoint = await self.storage.webhook_endpoint_create(
            endpoint=NewWebhookEndpoint(
                id=self.ids.new("ep"),
                tenant_id=tenant_id,
                url=url.strip(),
                secret=new_webhook_secret(),
                description=description,
                event_types=types,
                include_result=include_result,
                disabled=disabled,
                progress_interval_s=interval_s,
            )
        )
        log.info(
            "webhook endpoint created", extra={"endpoint_id": endpoint.id, "tenant_id": tenant_id}
        )
        return endpoint

    async def get(self, *, tenant_id: str, endpoint_id: str) -> WebhookEndpoint:
        endpoint = await self.storage.webhook_endpoint_get(
            endpoint_id=endpoint_id, tenant_id=tenant_id
        )
        if endpoint is None:
            raise errors.NotFound("webhook endpoint", endpoint_id)
        return endpoint

    async def list(
        self, *, tenant_id: str, after: str | None = None, limit: int = 20
    ) -> tuple[builtins.list[WebhookEndpoint], bool]:
        if after is not None:
            await self.get(tenant_id=tenant_id, endpoint_id=after)
        endpoints = await self.storage.webhook_endpoint_list(
            tenant_id=tenant_id, after=after, limit=limit + 1
        )
        return endpoints[:limit], len(endpoints) > limit

    async def update(
        self, *, tenant_id: str, endpoint_id: str, changes: EndpointChanges
    ) -> WebhookEndpoint:
        if changes.event_types is not None:
            changes = dataclasses.replace(
                changes, event_types=check_event_types(changes.event_types)
            )
        if changes.progress_interval_s is not None:
            check_progress_interval(changes.progress_interval_s)
        if changes.url is not None:
            await self.guard.resolve(changes.url)
            changes = dataclasses.replace(changes, url=changes.url.strip())
        endpoint = await self.storage.webhook_endpoint_update(
            endpoint_id=endpoint_id, tenant_id=tenant_id, changes=changes
        )
        if endpoint is None:
            raise errors.NotFound("webhook endpoint", endpoint_id)
        return endpoint

    async def delete(self, *, tenant_id: str, endpoint_id: str) -> None:
        """Delete the endpoint; its pending deliveries fail ('endpoint deleted')."""
        if not await self.storage.webhook_endpoint_delete(
            endpoint_id=endpoint_id, tenant_id=tenant_id
        ):
            raise errors.NotFound("webhook endpoint", endpoint_id)

    async def rotate_secret(
        self, *, tenant_id: str, endpoint_id: str, grace_s: float = DEFAULT_ROTATION_GRACE_S
    ) -> WebhookEndpoint:
        """A new secret, shown once; the old one keeps signing (as a second `v1,` entry) for
        `grace_s` seconds so receivers can switch without dropping events."""
        if not 0 <= grace_s <= MAX_ROTATION_GRACE_S:
            raise errors.InvalidRequest(
                f"grace_period_s must be between 0 and {MAX_ROTATION_GRACE_S}",
                param="grace_period_s",
            )
        endpoint = await self.storage.webhook_endpoint_rotate_secret(
            endpoint_id=endpoint_id,
            tenant_id=tenant_id,
            secret=new_webhook_secret(),
            grace_s=grace_s,
        )
        if endpoint is None:
            raise errors.NotFound("webhook endpoint", endpoint_id)
        log.info(
            "webhook secret rotated", extra={"endpoint_id": endpoint_id, "tenant_id": tenant_id}
        )
        return endpoint

    async def ping(self, *, tenant_id: str, endpoint_id: str) -> PingResult:
        """Send a signed `ping` event now, through the same guard, and answer what happened.
        Nothing is stored; a disabled endpoint can be pinged before it is enabled again."""
        endpoint = await self.get(tenant_id=tenant_id, endpoint_id=endpoint_id)
        now = self.clock.now()
        event_id = "evt_" + secrets.token_hex(12)
        body = orjson.dumps(
            {
                "id": event_id,
                "object": "event",
                "type": webhooks.PING,
                "created_at": int(now.timestamp()),
                "data": {"endpoint_id": endpoint.id},
            }
        )
        signing = [endpoint.secret]
        expires = endpoint.previous_secret_expires_at
        if endpoint.previous_secret and expires is not None and expires > now:
            signing.append(endpoint.previous_secret)
        headers = standard_webhooks.signed_headers(signing, event_id, int(now.timestamp()), body)
        headers["content-type"] = "application/json"
        async with WebhookSender(
            self.guard,
            timeout_s=self.settings.webhook_timeout_s,
            ssl_context=self._ssl_context,
            max_connections=1,
        ) as sender:
            result = await sender.send(endpoint.url, body, headers)
        error = result.error
        if result.status_code is not None:
            error = webhooks.judge_answer(result.status_code, result.headers, now=now).error
        return PingResult(event_id, result.status_code, result.latency_ms, error)

    async def recover(self, *, tenant_id: str, endpoint_id: str, since: datetime) -> int:
        """Re-queue the endpoint's failed deliveries created since `since`; they are sent
        again on a fresh schedule under their original webhook-ids."""
        endpoint = await self.get(tenant_id=tenant_id, endpoint_id=endpoint_id)
        if endpoint.disabled:
            raise errors.Conflict(
                f"webhook endpoint {endpoint_id} is disabled; enable it first",
                code="endpoint_disabled",
            )
        return await self.storage.delivery_recover(
            endpoint_id=endpoint_id, tenant_id=tenant_id, since=since
        )

    # -- deliveries -----------------------------------------------------------------------

    async def job_deliveries(self, *, tenant_id: str, job_id: str) -> builtins.list[JobDelivery]:
        if await self.storage.job_get(job_id=job_id, tenant_id=tenant_id) is None:
            raise errors.NotFound("job", job_id)
        entries = await self.storage.outbox_for_job(job_id=job_id)
        attempts = await self.storage.delivery_attempts_for_job(job_id=job_id)
        by_row: dict[str, builtins.list[DeliveryAttempt]] = {}
        for attempt in attempts:
            by_row.setdefault(attempt.outbox_id, []).append(attempt)
        return [JobDelivery(entry, by_row.get(entry.id, [])) for entry in entries]
