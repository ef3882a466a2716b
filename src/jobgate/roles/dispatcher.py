"""The webhook dispatcher: leases due outbox rows, sends each signed event, records every attempt.

At-least-once: a row is claimed under a lease (its `next_attempt_at` pushed past the send's
timeout, with a fresh token) and its result is written fenced on that token. A dispatcher that
dies between sending and recording loses nothing: the lease runs out and the row is sent again
under the same `webhook-id`, which receivers deduplicate on. Safe to run in many processes.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import random
from datetime import datetime

import orjson

from jobgate import errors, failpoints, metrics, tracing, wakeups
from jobgate.clock import Clock, SystemClock, to_unix
from jobgate.config import Settings
from jobgate.domain import responses, webhooks
from jobgate.services import output_progress
from jobgate.services.poison_log import traceback_text
from jobgate.services.webhook_guard import UrlGuard
from jobgate.services.webhook_transport import SendResult, WebhookSender
from jobgate.storage import protocol
from jobgate.storage.records import (
    ENDPOINT_DISABLED,
    ENDPOINT_MISSING,
    Delivery,
    DeliveryOutcome,
)
from jobgate.wire import standard_webhooks
from jobgate.wire.openai_batches import BatchStatus

log = logging.getLogger(__name__)

_GATHER_S = 0.02  # how long a full dispatcher waits for slots to free before claiming again
# A progress (job.progress, batch.progress) whose job or batch stopped running before it was sent
_SUPERSEDED = "superseded"


@dataclasses.dataclass(slots=True)
class DispatchPass:
    """What one `deliver_once` did."""

    claimed: int = 0
    succeeded: int = 0
    retrying: int = 0
    failed: int = 0  # given up for good
    released: int = 0  # handed back unsent: their endpoint was at its concurrency cap
    lost: int = 0  # results dropped: the lease had passed to another dispatcher

    def count(self, state: str | None) -> None:
        if state == "succeeded":
            self.succeeded += 1
        elif state == "pending":
            self.retrying += 1
        elif state == "failed":
            self.failed += 1
        else:
            self.lost += 1


@dataclasses.dataclass(frozen=True, slots=True)
class _Verdict:
    outcome: DeliveryOutcome
    give_up_reason: str | None = None  # set when the delivery fails for good


def lease_for(timeout_s: float) -> float:
    """How long a claim lasts: the send's timeout plus room to build and record it."""
    return max(2 * timeout_s, timeout_s + 5)


class Dispatcher:
    def __init__(
        self,
        *,
        storage: protocol.DispatcherStorage,
        settings: Settings,
        clock: Clock | None = None,
        sender: WebhookSender | None = None,
        guard: UrlGuard | None = None,
        rng: random.Random | None = None,
        concurrency: int | None = None,
        endpoint_concurrency: int | None = None,
        poll_interval_s: float = 1.0,
    ) -> None:
        self._storage = storage
        self._settings = settings
        self._clock = clock or SystemClock()
        self._rng = rng
        self.profile = settings.webhook_retry_profile
        self.concurrency = concurrency or settings.webhook_concurrency
        self.endpoint_concurrency = endpoint_concurrency or settings.webhook_endpoint_concurrency
        self.poll_interval_s = poll_interval_s
        self._owns_sender = sender is None
        self.sender = sender or WebhookSender(
            guard or UrlGuard.from_settings(settings),
            timeout_s=settings.webhook_timeout_s,
            max_connections=self.concurrency,
        )
        self.lease_s = lease_for(self.sender.timeout_s)
        self._inflight: collections.Counter[str] = collections.Counter()
        self._tasks: set[asyncio.Task[str | None]] = set()
        self._claim_batch = max(1, self.concurrency // 8)
        self._kick = wakeups.Wakeup()
        self._stopping = False

    async def aclose(self) -> None:
        if self._owns_sender:
            await self.sender.aclose()

    # -- one pass --------------------------------------------------------------------------

    async def deliver_once(
        self, *, now: datetime | None = None, limit: int | None = None
    ) -> DispatchPass:
        """Claim what is due (up to `limit`, default the concurrency), deliver it all at once
        and record every result. `now` (tests) stands for the database's clock."""
        tally = DispatchPass()
        claimed, tally.released = await self._claim(limit or self.concurrency, now)
        tally.claimed = len(claimed)
        for state in await asyncio.gather(*(self._deliver(d, now) for d in claimed)):
            tally.count(state)
        return tally

    async def _claim(self, limit: int, now: datetime | None) -> tuple[list[Delivery], int]:
        busy = [key for key, n in self._inflight.items() if n >= self.endpoint_concurrency]
        claimed = await self._storage.delivery_claim_due(
            limit=limit, lease_s=self.lease_s, busy=busy, now=now
        )
        accepted: list[Delivery] = []
        released = 0
        for delivery in claimed:
            key = delivery.limit_key
            if self._inflight[key] >= self.endpoint_concurrency:
                # Over this endpoint's cap: hand it back now rather than hold the lease idle.
                await self._storage.delivery_release(delivery=delivery, now=now)
                released += 1
                continue
            self._inflight[key] += 1
            accepted.append(delivery)
        return accepted, released

    async def _deliver(self, delivery: Delivery, now: datetime | None) -> str | None:
        """Send and record one delivery; returns its new state (None: the lease was lost)."""
        try:
            verdict = await self._attempt(delivery, now)
            applied = await self._storage.delivery_record(
                delivery=delivery, outcome=verdict.outcome, now=now
            )
        except errors.StorageError as exc:
            # The lease runs out and the row is delivered again: late, never lost.
            log.warning(
                "webhook result not recorded: %s",
                type(exc).__name__,
                extra={"delivery_id": delivery.entry.id},
            )
            return None
        except Exception as exc:
            # This delivery cannot be built or judged (a stored value it cannot handle): it
            # fails alone, for good, instead of coming back every lease forever.
            verdict, applied = await self._poison(delivery, exc, now)
        finally:
            key = delivery.limit_key
            self._inflight[key] -= 1
            if self._inflight[key] <= 0:
                del self._inflight[key]
        if not applied:
            log.info("webhook lease lost", extra={"delivery_id": delivery.entry.id})
            return None
        outcome = verdict.outcome
        if outcome.state == "succeeded":
            metrics.WEBHOOK_DELIVERIES_SUCCEEDED.inc()
        elif verdict.give_up_reason is not None:
            metrics.WEBHOOK_DELIVERIES_FAILED.labels(verdict.give_up_reason).inc()
            # A progress overtaken by the job's end is routine, not a failure to look at.
            log.log(
                logging.INFO if verdict.give_up_reason == _SUPERSEDED else logging.WARNING,
                "webhook delivery failed for good",
                extra=_facts(delivery, outcome, reason=verdict.give_up_reason),
            )
        return outcome.state

    async def _poison(
        self, delivery: Delivery, exc: Exception, now: datetime | None
    ) -> tuple[_Verdict, bool]:
        entry = delivery.entry
        detail = f"building or sending the delivery raised {type(exc).__name__}"
        log.error(
            "poison webhook delivery failed alone",
            extra={
                "role": "dispatcher",
                "delivery_id": entry.id,
                "job_id": entry.job_id,
                "error_code": "poison_delivery",
                "detail": detail,
                "traceback": traceback_text(exc),
            },
        )
        metrics.POISON_JOBS.labels("dispatcher").inc()
        verdict = _give_up(f"poison_delivery: {detail}", "poison", attempted=False)
        try:
            applied = await self._storage.delivery_record(
                delivery=delivery, outcome=verdict.outcome, now=now
            )
        except errors.StorageError as failure:
            log.warning(
                "webhook result not recorded: %s",
                type(failure).__name__,
                extra={"delivery_id": entry.id},
            )
            applied = False
        return verdict, applied

    async def _attempt(self, delivery: Delivery, now: datetime | None) -> _Verdict:
        if delivery.endpoint_state == ENDPOINT_MISSING:
            return _give_up("endpoint deleted", "endpoint_deleted", attempted=False)
        if delivery.endpoint_state == ENDPOINT_DISABLED:
            return _give_up("endpoint disabled", "endpoint_disabled", attempted=False)
        if delivery.url is None or not delivery.secrets:
            return _give_up("no URL or secret to deliver with", "misconfigured", attempted=False)
        entry = delivery.entry
        if entry.event_type == webhooks.PROGRESS:
            progress_body = await self._progress_body(delivery)
            if progress_body is None:
                return _give_up("superseded: the job is no longer running", _SUPERSEDED)
            body = progress_body
        elif entry.event_type == webhooks.BATCH_PROGRESS:
            batch_body = await self._batch_progress_body(delivery)
            if batch_body is None:
                return _give_up("superseded: the batch is no longer in progress", _SUPERSEDED)
            body = batch_body
        else:
            body = await self._body(delivery)
        moment = now or self._clock.now()
        headers = standard_webhooks.signed_headers(
            delivery.secrets, entry.event_id, int(moment.timestamp()), body
        ) | {"content-type": "application/json"}
        with tracing.span(
            "jobgate.webhook_delivery",
            job_id=entry.job_id,
            event_id=entry.event_id,
            event_type=entry.event_type,
            attempt=entry.attempts,
        ) as attempt_span:
            result = await self.sender.send(delivery.url, body, headers)
            attempt_span.set_attribute("http.status_code", result.status_code or 0)
        if result.answered:
            failpoints.hit("after_webhook_sent_before_mark")
        verdict = self._judge(delivery, result, moment)
        metrics.WEBHOOK_ATTEMPTS.labels(_attempt_label(result, verdict.outcome)).inc()
        if result.answered:
            metrics.WEBHOOK_ATTEMPT_SECONDS.observe(result.latency_ms / 1000)
        log.info("webhook attempt", extra=_facts(delivery, verdict.outcome))
        return verdict

    def _judge(self, delivery: Delivery, result: SendResult, moment: datetime) -> _Verdict:
        def attempt(
            state: str,
            error: str | None,
            *,
            retry_in_s: float = 0.0,
            disable_endpoint: str | None = None,
        ) -> DeliveryOutcome:
            return DeliveryOutcome(
                state=state,
                attempted=True,
                status_code=result.status_code,
                latency_ms=result.latency_ms,
                error=error,
                retry_in_s=retry_in_s,
                disable_endpoint=disable_endpoint,
            )

        if result.status_code is None:
            if result.refusal is not None and result.refusal.permanent:
                return _Verdict(attempt("failed", result.error), "refused")
            retry_after_s = None
            error = result.error
        else:
            answer = webhooks.judge_answer(result.status_code, result.headers, now=moment)
            if answer.verdict == "succeeded":
                return _Verdict(attempt("succeeded", None))
            if answer.gone:
                disable = "gone" if delivery.entry.endpoint_id is not None else None
                return _Verdict(attempt("failed", answer.error, disable_endpoint=disable), "gone")
            retry_after_s, error = answer.retry_after_s, answer.error
        if not webhooks.retried(delivery.entry.event_type):
            return _Verdict(attempt("failed", error), "not_retried")
        delay_s = webhooks.retry_delay_s(delivery.attempt, self.profile, self._rng)
        if delay_s is None:
            return _Verdict(attempt("failed", error), "exhausted")
        if retry_after_s is not None:
            delay_s = retry_after_s
        return _Verdict(attempt("pending", error, retry_in_s=delay_s))

    async def _body(self, delivery: Delivery) -> bytes:
        entry = delivery.entry
        if entry.event_type.startswith("response."):
            return await self._response_body(delivery)
        thin = webhooks.thin_payload(
            event_id=entry.event_id,
            event_type=entry.event_type,
            created_at=int(entry.created_at.timestamp()),
            job_id=entry.job_id,
            status=entry.job_status,
        )
        if not delivery.include_result:
            return orjson.dumps(thin)
        job = await self._storage.job_get(job_id=entry.job_id)
        fields = (
            {}
            if job is None
            else {
                "result": job.result,
                "error": job.error,
                "usage": job.usage,
                "metadata": job.metadata,
                "completed_at": to_unix(job.completed_at),
            }
        )
        return webhooks.encode_full(thin, fields)

    async def _progress_body(self, delivery: Delivery) -> bytes | None:
        """A `job.progress` with the figures of this moment (so a newer progress supersedes
        an unsent one), or None once the job stopped running: progress is never sent after the
        job left `running` (the claim holds its later events while one is in flight)."""
        entry = delivery.entry
        job = await self._storage.job_get(job_id=entry.job_id)
        if job is None:
            return None
        streamed = await output_progress.streamed_so_far(self._storage, job)
        if streamed is None:
            return None
        fraction = streamed.fraction if streamed.fraction is not None else job.progress
        return orjson.dumps(
            webhooks.progress_payload(
                event_id=entry.event_id,
                created_at=int(entry.created_at.timestamp()),
                job_id=entry.job_id,
                output_tokens=streamed.output_tokens,
                progress=fraction,
            )
        )

    async def _batch_progress_body(self, delivery: Delivery) -> bytes | None:
        """A `batch.progress` with the request_counts of this moment, or None once the batch
        left `in_progress` (its terminal event, held while this is in flight, comes last)."""
        entry = delivery.entry
        batch = await self._storage.batch_get(batch_id=entry.job_id)
        if batch is None or batch.status != BatchStatus.IN_PROGRESS:
            return None
        counts = await self._storage.batch_counts(batch_id=batch.id)
        return orjson.dumps(
            webhooks.batch_progress_payload(
                event_id=entry.event_id,
                created_at=int(entry.created_at.timestamp()),
                batch_id=batch.id,
                request_counts={
                    "total": batch.total,
                    "completed": counts.completed,
                    "failed": counts.failed,
                },
            )
        )

    async def _response_body(self, delivery: Delivery) -> bytes:
        """A /v1/responses job's event, in OpenAI's shape (the SDK's `webhooks.unwrap()`
        verifies and types it); with results, the Response object under `data.response`."""
        entry = delivery.entry
        event = responses.webhook_event(
            event_id=entry.event_id,
            event_type=entry.event_type,
            created_at=int(entry.created_at.timestamp()),
            response_id=entry.job_id,
        )
        if not delivery.include_result:
            return orjson.dumps(event)
        job = await self._storage.job_get(job_id=entry.job_id)
        rendered = None if job is None or job.purged_at is not None else responses.render(job)
        return responses.webhook_body(event, rendered, max_bytes=webhooks.MAX_PAYLOAD_BYTES)

    # -- the loop --------------------------------------------------------------------------

    def request_stop(self) -> None:
        self._stopping = True
        self._kick.set()

    async def run(self) -> None:
        """Deliver until asked to stop: claim whenever a slot frees or the outbox grows (and
        every poll interval, for retries coming due), keeping up to `concurrency` in flight."""
        with self._storage.changes.watch_outbox() as grown:
            try:
                async with self._kick.relaying(grown):
                    while not self._stopping:
                        self._kick.clear()
                        free = self.concurrency - len(self._tasks)
                        claimed: list[Delivery] = []
                        if free > 0:
                            try:
                                claimed, _ = await self._claim(free, None)
                            except errors.StorageError as exc:
                                log.warning("webhook claim failed: %s", type(exc).__name__)
                            for delivery in claimed:
                                self._spawn(delivery)
                            if claimed and len(claimed) == free:
                                # More may be due: claim again once a few slots have freed (a
                                # claim per batch of completions, not one per completion).
                                await self._slots_free(self._claim_batch, _GATHER_S)
                                continue
                        await self._kick.sleep(self.poll_interval_s)
            finally:
                await self._drain()

    async def _slots_free(self, wanted: int, within_s: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within_s
        while self.concurrency - len(self._tasks) < wanted and not self._stopping:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            await self._kick.sleep(remaining)

    def _spawn(self, delivery: Delivery) -> None:
        task = asyncio.create_task(self._deliver(delivery, None), name="webhook-delivery")
        self._tasks.add(task)

        def done(finished: asyncio.Task[str | None]) -> None:
            self._tasks.discard(finished)
            self._kick.set()

        task.add_done_callback(done)

    async def _drain(self) -> None:
        """Let in-flight sends finish within the shutdown grace; cut the rest (their leases
        run out and they are sent again later)."""
        if not self._tasks:
            return
        _, pending = await asyncio.wait(
            set(self._tasks), timeout=max(0.1, self._settings.shutdown_grace_s)
        )
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)


def _give_up(error: str, reason: str, *, attempted: bool = False) -> _Verdict:
    return _Verdict(DeliveryOutcome(state="failed", attempted=attempted, error=error), reason)


def _attempt_label(result: SendResult, outcome: DeliveryOutcome) -> str:
    if outcome.state == "succeeded":
        return "succeeded"
    if result.refusal is not None:
        return "refused"
    if result.status_code is None:
        return "timeout" if (result.error or "").startswith("timeout") else "error"
    return "failed"


def _facts(delivery: Delivery, outcome: DeliveryOutcome, **more: object) -> dict[str, object]:
    entry = delivery.entry
    return {
        "delivery_id": entry.id,
        "job_id": entry.job_id,
        "tenant_id": entry.tenant_id,
        "event_type": entry.event_type,
        "endpoint_id": entry.endpoint_id,
        "attempt": entry.attempts,
        "status_code": outcome.status_code,
        "latency_ms": outcome.latency_ms,
        "to_state": outcome.state,
        **more,
    }
