"""The dispatcher's side of progress webhooks, on both stores against a real local receiver: a
`job.progress` is signed like every event and carries the output so far as of its send; a
failed one is not retried (the next progress stands in); one whose job ended before its send
is dropped unsent, and the job's terminal event follows it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from jobgate.client.webhooks import verify_webhook
from jobgate.domain.job import Lease
from jobgate.domain.states import JobState
from jobgate.domain.verdicts import Finish
from jobgate.storage.protocol import Storage
from jobgate.storage.records import Tenant, WebhookEndpoint
from jobgate.testing import FakeClock
from jobgate.testing.receiver import Reply, WebhookReceiver
from tests.roles.test_dispatcher import dev_settings, failed_count, make_dispatcher, replies
from tests.storage.helpers import finish_one, make_tenant, new_job, submit_one
from tests.storage.webhook_helpers import make_endpoint

pytestmark = pytest.mark.asyncio

__all__ = ["make_dispatcher"]  # the fixture, shared with the dispatcher's own tests

PROGRESS = "job.progress"
REQUEST = {
    "model": "sim-echo",
    "messages": [{"role": "user", "content": "hi"}],
    "stream": True,
    "max_tokens": 100,
}


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver() as running:
        yield running


async def streaming(
    storage: Storage, clock: FakeClock, url: str, **fields: Any
) -> tuple[Tenant, WebhookEndpoint, Lease]:
    tenant = await make_tenant(storage)
    endpoint = await make_endpoint(
        storage, tenant, clock, url=url, event_types=(PROGRESS, "job.succeeded"), **fields
    )
    job = (await submit_one(storage, job=new_job(tenant, request=REQUEST), now=clock.now())).job
    [claimed] = await storage.job_claim(worker_id="w", limit=1, lease_ttl_s=600, now=clock.now())
    return tenant, endpoint, Lease(job.id, claimed.lease_token or "")


async def test_a_progress_is_signed_and_carries_the_output_so_far(
    storage: Storage, clock: FakeClock, receiver: WebhookReceiver, make_dispatcher: Any
) -> None:
    _, endpoint, lease = await streaming(storage, clock, receiver.url)
    await storage.job_output_append(lease=lease, text="x" * 40, now=clock.now())
    await storage.outbox_progress_arm(job_id=lease.job_id, now=clock.now())
    # More output before the send: the event says what is there when it is sent.
    await storage.job_output_append(lease=lease, text="y" * 40, now=clock.now())
    tally = await make_dispatcher().deliver_once(now=clock.now())
    assert tally.succeeded == 1
    [request] = receiver.received
    event = verify_webhook(request.body, request.headers, endpoint.secret)
    assert event["type"] == PROGRESS
    assert event["data"] == {
        "id": lease.job_id,
        "status": "running",
        "output_tokens": 20,  # 80 characters at 4 a token, as the job read shows them
        "progress": 0.2,  # of max_tokens
    }


async def test_a_failed_progress_is_not_retried(
    storage: Storage, clock: FakeClock, receiver: WebhookReceiver, make_dispatcher: Any
) -> None:
    receiver.script = replies(Reply(500))
    _, _, lease = await streaming(storage, clock, receiver.url)
    await storage.outbox_progress_arm(job_id=lease.job_id, now=clock.now())
    before = failed_count("not_retried")
    dispatcher = make_dispatcher()
    assert (await dispatcher.deliver_once(now=clock.now())).failed == 1
    assert failed_count("not_retried") == before + 1
    clock.advance(3600)
    assert (await dispatcher.deliver_once(now=clock.now())).claimed == 0
    [row] = await storage.outbox_for_job(job_id=lease.job_id)
    assert row.state == "failed" and row.attempts == 1
    # The next progress, an interval after that attempt, is the retry.
    assert await storage.outbox_progress_arm(job_id=lease.job_id, now=clock.now()) == 1
    assert (await dispatcher.deliver_once(now=clock.now())).succeeded == 1
    assert len(receiver.received) == 2


async def test_a_progress_whose_job_ended_is_dropped_and_the_end_is_sent(
    storage: Storage, clock: FakeClock, receiver: WebhookReceiver, make_dispatcher: Any
) -> None:
    _, _, lease = await streaming(
        storage, clock, receiver.url, progress_interval_s=1, include_result=False
    )
    await storage.outbox_progress_arm(job_id=lease.job_id, now=clock.now())
    await finish_one(
        storage,
        finish=Finish(lease=lease, state=JobState.SUCCEEDED, reason="t", result={"ok": True}),
        now=clock.now(),
    )
    before = failed_count("superseded")
    tally = await make_dispatcher(settings=dev_settings()).deliver_once(now=clock.now())
    assert (tally.succeeded, tally.failed) == (1, 1)
    assert failed_count("superseded") == before + 1
    types = [orjson.loads(r.body)["type"] for r in receiver.received]
    assert types == ["job.succeeded"]
    rows = {r.event_type: r for r in await storage.outbox_for_job(job_id=lease.job_id)}
    assert rows[PROGRESS].state == "failed"
    assert "superseded" in (rows[PROGRESS].last_error or "")
