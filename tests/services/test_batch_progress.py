"""`batch.progress` webhooks end to end on both stores: the batches role arms them when an
in-progress batch's counts move (never for unchanged counts, never for a tenant without an
endpoint that lists the event), the dispatcher sends the request_counts of the moment, signed,
and drops one whose batch ended before its send; the batch's end event comes last."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Iterator
from typing import Any

import orjson
import pytest

from jobgate.client.webhooks import verify_webhook
from jobgate.config import Settings
from jobgate.process.runtime import Runtime
from jobgate.roles.dispatcher import Dispatcher
from jobgate.testing import FakeClock
from jobgate.testing.receiver import Reply, WebhookReceiver
from tests.roles.test_batch_runner import make_batch
from tests.roles.test_dispatcher import replies
from tests.storage.webhook_helpers import make_endpoint

pytestmark = pytest.mark.asyncio

PROGRESS = "batch.progress"


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver() as running:
        yield running


@pytest.fixture
async def dispatcher(runtime: Runtime, clock: FakeClock) -> AsyncIterator[Dispatcher]:
    settings = Settings(webhook_allow_http=True, webhook_allow_cidrs=("127.0.0.0/8",))
    running = Dispatcher(
        storage=runtime.storage, settings=settings, clock=clock, rng=random.Random(1)
    )
    yield running
    await running.aclose()


def sent(receiver: WebhookReceiver) -> list[dict[str, Any]]:
    return [orjson.loads(request.body) for request in receiver.received]


async def test_progress_follows_the_counts_and_the_end_comes_last(
    runtime: Runtime, clock: FakeClock, receiver: WebhookReceiver, dispatcher: Dispatcher
) -> None:
    tenant = (await runtime.tenants.create("acme")).tenant
    endpoint = await make_endpoint(
        runtime.storage,
        tenant,
        clock,
        url=receiver.url,
        event_types=(PROGRESS, "batch.completed"),
        progress_interval_s=1,
    )
    batch_id = await make_batch(runtime, tenant.id, 3)
    runner = runtime.batch_runner()
    await runner.batches_once(now=clock.now())  # validated
    await runner.batches_once(now=clock.now())  # expanded: in progress, nothing done yet
    await dispatcher.deliver_once(now=clock.now())
    [request] = receiver.received
    event = verify_webhook(request.body, request.headers, endpoint.secret)
    assert event["type"] == PROGRESS
    assert event["data"] == {
        "id": batch_id,
        "object": "batch",
        "status": "in_progress",
        "request_counts": {"total": 3, "completed": 0, "failed": 0},
    }

    # Unchanged counts arm nothing, however many passes.
    for _ in range(3):
        clock.advance(2)
        await runner.batches_once(now=clock.now())
    assert (await dispatcher.deliver_once(now=clock.now())).claimed == 0

    await runtime.worker().run_once(limit=1)
    clock.advance(2)
    await runner.batches_once(now=clock.now())
    await dispatcher.deliver_once(now=clock.now())
    assert sent(receiver)[-1]["data"]["request_counts"] == {
        "total": 3,
        "completed": 1,
        "failed": 0,
    }

    # A progress armed, then the batch ends before it is sent: dropped; the end is sent.
    await runtime.worker().run_once(limit=1)
    clock.advance(2)
    await runner.batches_once(now=clock.now())
    await runtime.worker().run_once(limit=10)
    for _ in range(3):
        clock.advance(2)
        await runner.batches_once(now=clock.now())
    batch = await runtime.storage.batch_get(batch_id=batch_id)
    assert batch is not None and batch.status == "completed"
    for _ in range(2):
        await dispatcher.deliver_once(now=clock.now())
    types = [event["type"] for event in sent(receiver)]
    assert types == [PROGRESS, PROGRESS, "batch.completed"]
    rows = {r.event_type: r for r in await runtime.storage.outbox_for_job(job_id=batch_id)}
    assert rows[PROGRESS].state == "failed"
    assert "superseded" in (rows[PROGRESS].last_error or "")


async def test_a_failed_progress_is_not_retried(
    runtime: Runtime, clock: FakeClock, receiver: WebhookReceiver, dispatcher: Dispatcher
) -> None:
    receiver.script = replies(Reply(500))
    tenant = (await runtime.tenants.create("acme")).tenant
    await make_endpoint(runtime.storage, tenant, clock, url=receiver.url, event_types=(PROGRESS,))
    batch_id = await make_batch(runtime, tenant.id, 2)
    runner = runtime.batch_runner()
    for _ in range(2):
        await runner.batches_once(now=clock.now())
    assert (await dispatcher.deliver_once(now=clock.now())).failed == 1
    clock.advance(3600)
    assert (await dispatcher.deliver_once(now=clock.now())).claimed == 0
    [row] = await runtime.storage.outbox_for_job(job_id=batch_id)
    assert row.state == "failed" and row.attempts == 1


async def test_no_endpoint_listing_it_means_no_counts_read(
    runtime: Runtime, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant = (await runtime.tenants.create("acme")).tenant
    await make_endpoint(runtime.storage, tenant, clock, event_types=("batch.completed",))
    batch_id = await make_batch(runtime, tenant.id, 2)
    runner = runtime.batch_runner()
    reads: list[str] = []
    counts = runner.storage.batch_counts

    async def counted(*, batch_id: str) -> Any:
        reads.append(batch_id)
        return await counts(batch_id=batch_id)

    monkeypatch.setattr(runner.storage, "batch_counts", counted)
    for _ in range(4):
        clock.advance(2)
        await runner.batches_once(now=clock.now())
    assert reads == []
    assert await runtime.storage.outbox_for_job(job_id=batch_id) == []
