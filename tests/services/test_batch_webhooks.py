"""Batch webhooks: `batch.completed` / `batch.cancelled` / `batch.expired` are
queued once per endpoint when a batch ends, delivered signed, and unwrap with the official
SDK's `webhooks.unwrap()` as OpenAI's typed events. Both backends."""

from __future__ import annotations

import random
from collections.abc import Iterator

import openai
import pytest

from jobgate.config import Settings
from jobgate.domain import response_requests
from jobgate.process.runtime import Runtime
from jobgate.roles.dispatcher import Dispatcher
from jobgate.services.responses import ResponsesService
from jobgate.testing import FakeClock
from jobgate.testing.receiver import WebhookReceiver
from tests.roles.test_batch_runner import make_batch, make_batch_of
from tests.storage.webhook_helpers import make_endpoint


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver() as running:
        yield running


async def test_a_completed_batch_sends_batch_completed_once(
    runtime: Runtime, clock: FakeClock, receiver: WebhookReceiver
) -> None:
    issued = await runtime.tenants.create("acme")
    tenant = issued.tenant
    everything = await make_endpoint(runtime.storage, tenant, clock, url=receiver.url)
    await make_endpoint(
        runtime.storage, tenant, clock, url=receiver.url, event_types=("job.succeeded",)
    )  # wants no batch events
    batch_id = await make_batch(runtime, tenant.id, 3)
    runner = runtime.batch_runner()
    for _ in range(2):  # validated, expanded
        await runner.batches_once()
    await runtime.worker().run_once(limit=10)
    for _ in range(3):
        await runner.batches_once()
    batch = await runtime.storage.batch_get(batch_id=batch_id)
    assert batch is not None and batch.status == "completed"
    # A pass that re-finalizes (killed before its final update) queues nothing more.
    await runtime.storage.batch_event_insert(
        batch_id=batch_id, tenant_id=tenant.id, event_type="batch.completed", status="completed"
    )
    outbox = await runtime.storage.outbox_for_job(job_id=batch_id)
    assert [(e.event_type, e.endpoint_id) for e in outbox] == [("batch.completed", everything.id)]
    settings = Settings(webhook_allow_http=True, webhook_allow_cidrs=("127.0.0.0/8",))
    dispatcher = Dispatcher(
        storage=runtime.storage, settings=settings, clock=clock, rng=random.Random(1)
    )
    try:
        for _ in range(3):
            await dispatcher.deliver_once()  # the database's clock: it stamped the events
    finally:
        await dispatcher.aclose()
    batch_events = [r for r in receiver.received if b"batch." in r.body]
    assert len(batch_events) == 1
    request = batch_events[0]
    client = openai.OpenAI(api_key="unused", webhook_secret=everything.secret)
    event = client.webhooks.unwrap(request.body, request.headers)
    assert type(event).__name__ == "BatchCompletedWebhookEvent"
    assert event.type == "batch.completed" and event.data.id == batch_id


async def test_a_responses_batch_sends_its_batch_event_and_no_response_event(
    runtime: Runtime, clock: FakeClock
) -> None:
    """OpenAI sends `response.*` webhooks for background responses only: a batch's lines send
    none (not even to an endpoint that wants every event); the batch sends `batch.completed`."""
    tenant = (await runtime.tenants.create("acme")).tenant
    everything = await make_endpoint(runtime.storage, tenant, clock, url="https://example.com/h")
    lines = [
        {"custom_id": f"r{i}", "method": "POST", "url": "/v1/responses",
         "body": {"model": "sim-echo", "input": f"question {i}"}}
        for i in range(2)
    ]  # fmt: skip
    batch_id = await make_batch_of(runtime, tenant.id, "/v1/responses", lines)
    interactive = await ResponsesService(runtime.jobs, runtime.feeds).create(
        tenant_id=tenant.id,
        request=response_requests.parse_create({"model": "sim-echo", "input": "now"}),
        raw_body=None,
    )
    runner = runtime.batch_runner()
    for _ in range(3):
        await runner.batches_once()
        await runtime.worker().run_once(limit=10)
    batch = await runtime.storage.batch_get(batch_id=batch_id)
    assert batch is not None and batch.status == "completed"
    jobs = await runtime.storage.job_list(tenant_id=tenant.id, limit=10)
    line_jobs = [job for job in jobs if job.metadata.get("batch_id") == batch_id]
    assert len(line_jobs) == 2
    for job in line_jobs:
        assert await runtime.storage.outbox_for_job(job_id=job.id) == []
    events = await runtime.storage.outbox_for_job(job_id=batch_id)
    assert [(e.event_type, e.endpoint_id) for e in events] == [("batch.completed", everything.id)]
    # A response created on its own still sends its event.
    mine = await runtime.storage.outbox_for_job(job_id=interactive.job.id)
    assert [e.event_type for e in mine] == ["response.completed"]


async def test_a_batch_that_fails_validation_sends_batch_failed_once(
    runtime: Runtime, clock: FakeClock
) -> None:
    tenant = (await runtime.tenants.create("acme")).tenant
    everything = await make_endpoint(runtime.storage, tenant, clock, url="https://example.com/h")
    line = {"custom_id": "a", "method": "POST", "url": "/v1/responses",
            "body": {"model": "sim-echo", "input": "x"}}  # fmt: skip
    batch_id = await make_batch_of(runtime, tenant.id, "/v1/chat/completions", [line])
    runner = runtime.batch_runner()
    await runner.batches_once()
    await runner.batches_once()
    batch = await runtime.storage.batch_get(batch_id=batch_id)
    assert batch is not None and batch.status == "failed" and batch.lease_token is None
    events = await runtime.storage.outbox_for_job(job_id=batch_id)
    assert [(e.event_type, e.endpoint_id) for e in events] == [("batch.failed", everything.id)]
