"""The seed's provider scenarios, end to end through real processes: the provider simulator
server (`jobgate simulator`, sending signed Standard Webhooks), api, worker, reconciler,
dispatcher and reaper on PostgreSQL, and the user's webhook endpoint.

tests/e2e/test_background_webhooks.py proves the same mechanisms inside one process; here each
scenario is checked as a user and an operator would see it: the job's state through the HTTP
API, exactly one applied terminal event, billed at most once, the provider job created once,
and exactly one terminal event delivered to the user's endpoint.
"""

from __future__ import annotations

import asyncio
import time

import asyncpg
import httpx
import orjson
import pytest

from jobgate.testing.receiver import WebhookReceiver
from jobgate.wire import standard_webhooks
from tests.e2e.provider_stack import (
    PROVIDER,
    PROVIDER_SECRET,
    Stack,
    proxied,
    start_stack,
)
from tests.support.processes import ProcessHarness, wait_until
from tests.support.proxy import TcpProxy

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

FORGER_SECRET = "whsec_" + "bm90LXRoZS1wcm92aWRlcnMta2V5LWF0LWFsbC0xMjM0NTY="


def _status_checks(stack: Stack, provider_job_id: str) -> int:
    """Status checks the provider answered or refused for this provider job."""
    path = f"/v1/responses/{provider_job_id}"
    return sum(
        1 for r in stack.sim_state()["request_log"] if r["method"] == "GET" and r["path"] == path
    )


def _provider_events(dsn: str, event_ids: list[str]) -> int:
    async def count() -> int:
        conn = await asyncpg.connect(dsn)
        try:
            found = await conn.fetchval(
                "SELECT count(*) FROM provider_events WHERE event_id = ANY($1::text[])", event_ids
            )
            return int(found)
        finally:
            await conn.close()

    return asyncio.run(count())


def test_duplicate_webhook(harness: ProcessHarness, pg_dsn: str, receiver: WebhookReceiver) -> None:
    """The provider delivers the same signed event twice (one webhook-id): both are answered
    200, the second is recorded in the job's log and not processed; the user gets one event."""
    stack = start_stack(harness, pg_dsn, receiver)
    job_id = stack.submit(sim={"latency_s": 0.3, "webhooks": "duplicate"})
    duplicate = stack.wait_event(job_id, "duplicate_provider_event")
    assert duplicate["applied"] is False and duplicate["actor"] == f"provider_webhook:{PROVIDER}"
    job = stack.assert_settled_once(job_id)
    deliveries = stack.deliveries()
    assert [(d["event_type"], d["status_code"]) for d in deliveries] == [
        ("response.completed", 200),
        ("response.completed", 200),
    ]
    assert deliveries[0]["webhook_id"] == deliveries[1]["webhook_id"]
    # Only the webhook can have settled it (the first status check is an hour away) ...
    events = stack.api.events(job_id)
    applied = [(e["to"], e["actor"]) for e in events if e["applied"]]
    assert applied[-1] == ("succeeded", "reconciler")
    # ... and the provider job was created once.
    assert stack.sim_state()["created"] == [job["provider_job_id"]]
    assert stack.creates_sent(job_id) == 1


def test_invalid_webhook_signature(
    harness: ProcessHarness, pg_dsn: str, receiver: WebhookReceiver
) -> None:
    """Forged, tampered, unsigned and replayed-late deliveries announcing a real completion are
    refused with 400 before anything is recorded, and the job does not move; the genuine event
    then settles it at once (so the refusals were not a matter of timing)."""
    stack = start_stack(harness, pg_dsn, receiver)
    job_id = stack.submit(sim={"latency_s": 0.2, "webhooks": "none"})
    provider_job_id = stack.until(job_id, lambda j: j["provider_job_id"] is not None)[
        "provider_job_id"
    ]
    wait_until(
        lambda: stack.provider_response(provider_job_id)["status"] == "completed",
        what="the provider to finish",
    )
    asked = _status_checks(stack, provider_job_id)  # our own look at the provider, above
    now = int(time.time())
    event = {
        "id": "evt_forged", "object": "event", "type": "response.completed", "created_at": now,
        "data": {"id": provider_job_id},
    }  # fmt: skip
    body = orjson.dumps(event)
    url = f"{stack.api_process.url}/v1/provider_webhooks/{PROVIDER}"
    attempts = {
        "wh_forged": (
            body,
            standard_webhooks.signed_headers([FORGER_SECRET], "wh_forged", now, body),
        ),
        "wh_tampered": (
            body.replace(b"evt_forged", b"evt_altered"),
            standard_webhooks.signed_headers([PROVIDER_SECRET], "wh_tampered", now, body),
        ),
        "wh_unsigned": (body, {"webhook-id": "wh_unsigned", "webhook-timestamp": str(now)}),
        "wh_replayed_late": (
            body,
            standard_webhooks.signed_headers(
                [PROVIDER_SECRET], "wh_replayed_late", now - 3600, body
            ),
        ),
    }
    for webhook_id, (content, headers) in attempts.items():
        answer = httpx.post(url, content=content, headers=headers, timeout=30)
        assert answer.status_code == 400, (webhook_id, answer.text)
        assert answer.headers["content-type"].startswith("application/problem+json")
    # Nothing was recorded, and no status check was triggered: the job is still running.
    assert _provider_events(pg_dsn, list(attempts)) == 0
    time.sleep(1.0)  # ample for a reconciler polling every 0.2 s to have acted on a wake-up
    assert stack.job(job_id)["status"] == "running"
    assert _status_checks(stack, provider_job_id) == asked
    assert stack.api_process.log_lines_matching("provider webhook rejected")
    # The genuine event, signed with the provider's secret, is acted on at once.
    genuine = standard_webhooks.signed_headers([PROVIDER_SECRET], "wh_genuine", now, body)
    answer = httpx.post(url, content=body, headers=genuine, timeout=30)
    assert answer.status_code == 200 and answer.json()["status"] == "accepted"
    stack.assert_settled_once(job_id)
    assert _status_checks(stack, provider_job_id) > asked
    assert stack.sim_state()["created"] == [provider_job_id]


def test_webhook_arriving_after_a_poll_already_completed_the_job(
    harness: ProcessHarness, pg_dsn: str, receiver: WebhookReceiver, proxies: list[TcpProxy]
) -> None:
    """The provider's webhook is held up in the network while the reconciler's status check
    (the poll) finds the job completed and settles it; when the webhook finally lands it is
    acknowledged, logged as a late event, and changes nothing."""
    stack = start_stack(
        harness,
        pg_dsn,
        receiver,
        provider={"reconcile_after_s": 0.2, "reconcile_max_interval_s": 1},
        webhook_target=proxied(proxies),
    )
    (webhook_link,) = proxies
    webhook_link.blackhole()
    job_id = stack.submit(sim={"latency_s": 0.3, "webhooks": "send"})
    job = stack.terminal(job_id)
    assert job["status"] == "succeeded"
    assert stack.deliveries() == []  # settled by the poll: no webhook had got through
    assert _status_checks(stack, job["provider_job_id"]) >= 1
    webhook_link.heal()  # the simulator's next delivery attempt gets through
    late = stack.wait_event(job_id, "late_provider_event", timeout_s=60)
    assert late["applied"] is False and late["to"] == "succeeded"
    assert [(d["event_type"], d["status_code"]) for d in stack.deliveries()] == [
        ("response.completed", 200)
    ]
    stack.assert_settled_once(job_id)
    assert stack.sim_state()["created"] == [job["provider_job_id"]]


@pytest.mark.parametrize("order", ["out_of_order", "early", "delayed"])
def test_delayed_or_out_of_order_event(
    harness: ProcessHarness,
    pg_dsn: str,
    receiver: WebhookReceiver,
    proxies: list[TcpProxy],
    order: str,
) -> None:
    """`out_of_order`: a stale, contradicting `response.failed` arrives after the real
    `response.completed` (while the job is being settled, or after: it is then logged as a
    late event); `early`: the event arrives before the worker has even recorded the
    provider's id; `delayed`: every byte of the webhook link is held up 1.5 s. Only webhooks
    can settle these jobs quickly (the first status check is an hour away), and each settles
    from the provider's answer, once: the stale `failed` never moves the job."""
    stack = start_stack(
        harness,
        pg_dsn,
        receiver,
        webhook_target=proxied(proxies) if order == "delayed" else None,
    )
    if order == "delayed":
        proxies[0].delay(1.5)
    mode = "send" if order == "delayed" else order
    job_id = stack.submit(sim={"latency_s": 0.3, "webhooks": mode})
    job = stack.assert_settled_once(job_id, "succeeded")
    expected = ["response.completed"] + (["response.failed"] if order == "out_of_order" else [])
    deliveries = wait_until(
        lambda: len(found := stack.deliveries()) >= len(expected) and found,
        what="the provider's deliveries to finish",
    )
    assert [(d["event_type"], d["status_code"]) for d in deliveries] == [
        (event_type, 200) for event_type in expected
    ]
    if order == "out_of_order":
        # Acknowledged and recorded, then acted on only through the provider's own answer.
        wait_until(
            lambda: len(stack.api_process.log_lines_matching('"response.failed"')) == 1,
            what="the stale event to be recorded",
        )
    events = stack.api.events(job_id)
    assert not [e for e in events if e["to"] == "failed" and e["applied"]], events
    late = [e for e in events if e["reason"] == "late_provider_event"]
    assert all(e["to"] == "failed" and not e["applied"] for e in late), late
    assert stack.sim_state()["created"] == [job["provider_job_id"]]
    assert stack.creates_sent(job_id) == 1


@pytest.mark.parametrize("failure", ["server_error", "connection_refused"])
def test_provider_status_fetch_failing_temporarily(
    harness: ProcessHarness,
    pg_dsn: str,
    receiver: WebhookReceiver,
    proxies: list[TcpProxy],
    failure: str,
) -> None:
    """The provider's webhook is lost and its status endpoint fails for a while (it answers
    500, or the reconciler's connections are refused): each failed check is recorded and
    retried with backoff, never creating the job again, and the job settles once it answers."""
    stack = start_stack(
        harness,
        pg_dsn,
        receiver,
        provider={"reconcile_after_s": 0.2, "reconcile_max_interval_s": 1},
        role_provider_url=(
            {"reconciler": proxied(proxies)} if failure == "connection_refused" else None
        ),
    )
    reconciler = stack.roles["reconciler"]
    if failure == "server_error":
        stack.inject("GET", "/v1/responses/", "server_error", times=3)
    else:
        proxies[0].refuse()
    job_id = stack.submit(sim={"latency_s": 0.2, "webhooks": "none"})
    wait_until(
        lambda: len(reconciler.log_lines_matching("status_check_failed")) >= 3,
        timeout_s=60,
        what="three failed status checks",
    )
    assert stack.job(job_id)["status"] == "running"
    if failure == "connection_refused":
        proxies[0].heal()
    job = stack.assert_settled_once(job_id)
    assert stack.sim_state()["created"] == [job["provider_job_id"]]
    assert stack.creates_sent(job_id) == 1
    failed = [orjson.loads(line) for line in reconciler.log_lines_matching("status_check_failed")]
    assert {record["job_id"] for record in failed} == {job_id}
    if failure == "server_error":
        assert len(failed) == 3 and {record["status_code"] for record in failed} == {500}
        assert _status_checks(stack, job["provider_job_id"]) == 4  # three refused, one answered


@pytest.mark.parametrize("policy", ["fail", "idempotent", "retry"])
def test_create_timeout_with_unknown_outcome_over_http(
    harness: ProcessHarness, pg_dsn: str, receiver: WebhookReceiver, policy: str
) -> None:
    """The simulator accepts the create, does the work, and drops the connection without an
    answer. `fail` (the default policy, a provider without idempotent creates): the job fails
    `creation_outcome_unknown`, never sent again. `idempotent` (`idempotent_creates = true`,
    the simulator deduplicates by Idempotency-Key): sent again, answered with the original, one
    provider object. `retry` (JOBGATE_UNKNOWN_OUTCOME=retry): sent again and run twice at the
    provider (the accepted risk), while jobgate still completes and bills the job once."""
    stack = start_stack(
        harness,
        pg_dsn,
        receiver,
        roles=("worker", "dispatcher"),
        provider={"idempotent_creates": policy == "idempotent"},
        simulator_args=("--idempotent",) if policy == "idempotent" else (),
        env={"JOBGATE_UNKNOWN_OUTCOME": "retry" if policy == "retry" else "fail"},
    )
    job_id = stack.submit_chat(sim={"fail_with": "drop", "fail_times": 1})
    path = "/v1/chat/completions"
    if policy == "fail":
        job = stack.assert_settled_once(job_id, "failed")
        assert job["error"]["code"] == "creation_outcome_unknown"
        assert job["creation_outcome"] == "unknown"
        assert stack.creates_sent(job_id, path) == 1
        assert len(stack.sim_state()["created"]) == 1  # the provider did run it
        return
    job = stack.assert_settled_once(job_id, "succeeded")
    assert stack.creates_sent(job_id, path) == 2
    created = stack.sim_state()["created"]
    if policy == "idempotent":
        assert created == [job["result"]["id"]]  # the original answer, replayed
    else:
        assert len(created) == 2 and job["result"]["id"] == created[1]
    unknown = [e for e in stack.api.events(job_id) if e["reason"] == "retryable_error"]
    assert len(unknown) == 1 and unknown[0]["to"] == "queued"
