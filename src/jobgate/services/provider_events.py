"""Inbound provider webhooks: verify the signature over the raw bytes before parsing anything,
record the event id under a unique constraint (a redelivery is acknowledged and not processed
again), and make the job it names due for the reconciler. The webhook never settles a job by
itself: the reconciler asks the provider, whose answer is authoritative, so an out-of-order or
stale event cannot move a job, let alone backwards. Webhooks are the fast path; the
reconciler's sweep is the slow path that makes the system correct without them.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping

import orjson

from jobgate import errors
from jobgate.clock import Clock
from jobgate.domain.states import JobState
from jobgate.providers.background import BackgroundProvider
from jobgate.providers.registry import ProviderRegistry
from jobgate.storage import protocol
from jobgate.wire import standard_webhooks

log = logging.getLogger(__name__)

ACCEPTED = "accepted"
DUPLICATE = "duplicate"
IGNORED = "ignored"  # verified, but about nothing jobgate tracks
_EVENT_STATES = {
    "completed": JobState.SUCCEEDED,
    "incomplete": JobState.SUCCEEDED,
    "failed": JobState.FAILED,
    "cancelled": JobState.CANCELLED,
}


class WebhookRejected(errors.InvalidRequest):
    """The delivery failed verification (or is not JSON): answered 400, never processed."""


@dataclasses.dataclass(frozen=True, slots=True)
class Receipt:
    status: str
    event_id: str
    job_id: str | None = None


class ProviderEventService:
    def __init__(
        self, *, storage: protocol.ProviderEventStorage, providers: ProviderRegistry, clock: Clock
    ) -> None:
        self._storage = storage
        self._providers = providers
        self._clock = clock

    def _verifier(self, name: str) -> tuple[BackgroundProvider, str]:
        """The provider and its signing secret; NotFound for anything that takes no webhooks."""
        try:
            provider = self._providers.get(name)
            config = self._providers.config(name)
        except (errors.UnknownProvider, KeyError):
            raise errors.NotFound("provider webhook endpoint", name) from None
        secret = (
            os.environ.get(config.webhook_secret_env or "") if config.webhook_secret_env else None
        )
        if not isinstance(provider, BackgroundProvider) or not secret:
            raise errors.NotFound("provider webhook endpoint", name)
        return provider, secret

    async def receive(self, name: str, headers: Mapping[str, str], body: bytes) -> Receipt:
        provider, secret = self._verifier(name)
        try:
            event_id = standard_webhooks.verify(
                secret, headers, body, now_s=self._clock.now().timestamp()
            )
        except standard_webhooks.SignatureError as exc:
            log.warning("provider webhook rejected: %s", exc, extra={"provider": name})
            raise WebhookRejected(str(exc), code="invalid_signature") from None
        try:
            payload = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise WebhookRejected("the webhook body is not JSON", code="invalid_json") from None
        event = provider.webhook_event(payload) if isinstance(payload, dict) else None
        event_type = str(payload.get("type")) if isinstance(payload, dict) else "unknown"
        outcome = await self._storage.provider_event_record(
            provider=name,
            event_id=event_id,
            event_type=event_type,
            provider_job_id=None if event is None else event.provider_job_id,
        )
        job = outcome.job
        if event is None:
            return Receipt(DUPLICATE if outcome.duplicate else IGNORED, event_id)
        if job is not None and (outcome.duplicate or job.terminal):
            # Recorded in the job's log, never applied: a redelivery, or news after the end.
            suffix = event.event_type.rsplit(".", 1)[-1]
            await self._storage.job_record_ignored(
                job_id=job.id,
                to_state=_EVENT_STATES.get(suffix, job.state),
                actor=f"provider_webhook:{name}",
                reason="duplicate_provider_event" if outcome.duplicate else "late_provider_event",
            )
        log.info(
            "provider webhook",
            extra={
                "provider": name,
                "event_type": event.event_type,
                "provider_job_id": event.provider_job_id,
                "job_id": None if job is None else job.id,
                "reason": DUPLICATE if outcome.duplicate else ACCEPTED,
            },
        )
        return Receipt(
            DUPLICATE if outcome.duplicate else ACCEPTED, event_id, None if job is None else job.id
        )
