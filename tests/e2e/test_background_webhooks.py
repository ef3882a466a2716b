"""Background mode over real sockets: jobgate (API, worker, reconciler) against the simulator
server, which sends signed webhooks to `POST /v1/provider_webhooks/upstream`. Completion by
webhook, by the reconciler's sweep when the webhook is lost, duplicate and out-of-order
webhooks, and the four cancellation outcomes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import orjson
import pytest

from jobgate.wire import standard_webhooks
from tests.e2e.gateway import SECRET_ENV, WEBHOOK_SECRET, eventually, gateway

pytestmark = pytest.mark.e2e


@pytest.fixture(autouse=True)
def webhook_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SECRET_ENV, WEBHOOK_SECRET)


async def test_completed_by_webhook(tmp_path: Path) -> None:
    # The first status check is an hour away: only the webhook can settle this job quickly.
    async with gateway(tmp_path) as gw:
        job = await gw.submit(sim={"latency_s": 0.3})
        done = await gw.terminal(job["id"])
        assert done["status"] == "succeeded" and done["result"]["status"] == "completed"
        assert done["provider_job_id"] == done["result"]["id"]
        assert [d.event_type for d in gw.simulator.deliveries] == ["response.completed"]
        assert gw.simulator.deliveries[0].status_code == 200
        events = await gw.events(job["id"])
        assert events[-1]["to"] == "succeeded" and events[-1]["actor"] == "reconciler"
        assert len(gw.simulator.engine.created) == 1


async def test_completed_by_the_sweep_when_the_webhook_is_lost(tmp_path: Path) -> None:
    async with gateway(tmp_path, reconcile_after_s=0.5) as gw:
        job = await gw.submit(sim={"latency_s": 0.2, "webhooks": "none"})
        done = await gw.terminal(job["id"])
        assert done["status"] == "succeeded"
        assert gw.simulator.deliveries == []  # nothing came: the sweep found it


async def test_duplicate_webhook_is_acknowledged_not_reprocessed(tmp_path: Path) -> None:
    async with gateway(tmp_path) as gw:
        job = await gw.submit(sim={"latency_s": 0.2, "webhooks": "duplicate"})
        done = await gw.terminal(job["id"])
        assert done["status"] == "succeeded"
        await eventually(lambda: len(gw.simulator.deliveries) >= 2)
        assert [d.status_code for d in gw.simulator.deliveries] == [200, 200]
        async with asyncio.timeout(10):
            while True:
                events = await gw.events(job["id"])
                if any(e["reason"] == "duplicate_provider_event" for e in events):
                    break
                await asyncio.sleep(0.05)
        applied = [e for e in events if e["applied"]]
        assert [e["to"] for e in applied] == ["queued", "running", "succeeded"]
        usage = await gw.runtime.storage.usage_for_job(job_id=job["id"])
        assert len(usage) == 1  # billed once


async def test_out_of_order_webhook_never_moves_the_job(tmp_path: Path) -> None:
    async with gateway(tmp_path) as gw:
        # The real `response.completed`, then a stale contradicting `response.failed` 50 ms later.
        job = await gw.submit(sim={"latency_s": 0.2, "webhooks": "out_of_order"})
        done = await gw.terminal(job["id"])
        assert done["status"] == "succeeded"
        await eventually(lambda: len(gw.simulator.deliveries) >= 2)
        assert [(d.event_type, d.status_code) for d in gw.simulator.deliveries] == [
            ("response.completed", 200),
            ("response.failed", 200),
        ]
        # The stale event lands after the end (logged, not applied) or, on a slow machine, before
        # the reconciler settled the job (then it only triggers a status check, which the
        # provider answers "completed"): either way the job never moves to failed. The late
        # path alone is pinned by tests/e2e/test_provider_scenarios.py, which holds the webhook
        # until the job has ended.
        events = await gw.events(job["id"])
        applied = [e["to"] for e in events if e["applied"]]
        assert applied == ["queued", "running", "succeeded"]
        late = [e for e in events if e["reason"] == "late_provider_event"]
        assert all(e["to"] == "failed" and e["applied"] is False for e in late)
        assert (await gw.job(job["id"]))["status"] == "succeeded"


async def test_webhook_before_the_create_is_answered(tmp_path: Path) -> None:
    """The provider's event arrives before the worker has recorded the provider's id: it is
    kept, and the accept that follows finds it and has the job checked at once."""
    async with gateway(tmp_path) as gw:
        job = await gw.submit(sim={"webhooks": "early"})
        done = await gw.terminal(job["id"], timeout_s=20)
        assert done["status"] == "succeeded"
        assert gw.simulator.deliveries[0].status_code == 200


async def test_webhook_signature_and_window_are_enforced(tmp_path: Path) -> None:
    async with gateway(tmp_path) as gw:
        body = orjson.dumps(
            {"id": "evt_1", "object": "event", "type": "response.completed",
             "created_at": 1, "data": {"id": "resp_x"}}
        )  # fmt: skip
        now = int(gw.runtime.clock.now().timestamp())
        url = "/v1/provider_webhooks/upstream"
        good = standard_webhooks.signed_headers([WEBHOOK_SECRET], "wh_1", now, body)
        bad = {**good, "webhook-signature": "v1,AAAA"}
        stale = standard_webhooks.signed_headers([WEBHOOK_SECRET], "wh_1", now - 301, body)
        tampered = body.replace(b"resp_x", b"resp_y")
        async with httpx.AsyncClient(base_url=str(gw.client.base_url)) as anonymous:
            assert (await anonymous.post(url, content=body, headers=bad)).status_code == 400
            assert (await anonymous.post(url, content=body, headers=stale)).status_code == 400
            assert (await anonymous.post(url, content=tampered, headers=good)).status_code == 400
            first = await anonymous.post(url, content=body, headers=good)
            assert first.status_code == 200 and first.json()["status"] == "accepted"
            again = await anonymous.post(url, content=body, headers=good)
            assert again.status_code == 200 and again.json()["status"] == "duplicate"
            unknown = await anonymous.post(
                "/v1/provider_webhooks/nobody", content=body, headers=good
            )
            assert unknown.status_code == 404


# -- cancellation, each outcome -------------------------------------------------------------


async def test_cancel_before_the_provider_accepted(tmp_path: Path) -> None:
    async with gateway(tmp_path, roles=("api", "reconciler")) as gw:  # no worker: stays queued
        job = await gw.submit()
        cancelled = (await gw.client.post(f"/v1/jobs/{job['id']}/cancel")).json()
        assert cancelled["status"] == "cancelled"
        assert cancelled["cancel_outcome"] == "not_started"
        assert gw.simulator.engine.requests == []  # the provider never heard of it


async def test_cancel_at_the_provider(tmp_path: Path) -> None:
    async with gateway(tmp_path) as gw:
        job = await gw.submit(sim={"latency_s": 60})
        await gw.until(job["id"], lambda j: j["provider_job_id"] is not None)
        await gw.client.post(f"/v1/jobs/{job['id']}/cancel")
        done = await gw.terminal(job["id"])
        assert done["status"] == "cancelled" and done["cancel_outcome"] == "at_provider"
        assert gw.simulator.engine.cancel_calls == [done["provider_job_id"]]
        remote = gw.simulator.engine.response(done["provider_job_id"])
        assert remote is not None and remote["status"] == "cancelled"


async def test_cancel_too_late_keeps_the_result(tmp_path: Path) -> None:
    async with gateway(tmp_path) as gw:
        job = await gw.submit(sim={"latency_s": 0.2, "webhooks": "none"})
        accepted = await gw.until(job["id"], lambda j: j["provider_job_id"] is not None)
        provider_job_id = accepted["provider_job_id"]
        # Finished at the provider; jobgate has not heard yet.
        await eventually(
            lambda: (
                (gw.simulator.engine.response(provider_job_id) or {}).get("status") == "completed"
            )
        )
        assert (await gw.job(job["id"]))["status"] == "running"
        await gw.client.post(f"/v1/jobs/{job['id']}/cancel")
        done = await gw.terminal(job["id"])
        assert done["status"] == "succeeded" and done["cancel_outcome"] == "too_late"
        assert "tell me later" in str(done["result"]["output"])


async def test_cancel_not_supported_discards_and_refunds(tmp_path: Path) -> None:
    async with gateway(tmp_path) as gw:
        job = await gw.submit(sim={"latency_s": 1.0, "cancel": "unsupported", "webhooks": "send"})
        await gw.until(job["id"], lambda j: j["provider_job_id"] is not None)
        await gw.client.post(f"/v1/jobs/{job['id']}/cancel")
        done = await gw.terminal(job["id"])
        assert done["status"] == "cancelled" and done["cancel_outcome"] == "not_supported"
        storage = gw.runtime.storage

        async def refunded() -> bool:  # the provider finishes; its webhook wakes the watch
            return len(await storage.usage_for_job(job_id=job["id"])) >= 2

        await eventually(refunded)
        kinds = sorted(e.kind for e in await storage.usage_for_job(job_id=job["id"]))
        assert kinds == ["completion", "refund"]
        final = await gw.job(job["id"])
        assert final["status"] == "cancelled" and final["result"] is None
        events = await gw.events(job["id"])
        # The webhook's own "late_provider_event" entry and the reconciler's discard are written
        # by two tasks (the API's handler, the watch it woke): either may come last.
        after_cancel = events[[e["to"] for e in events].index("cancelled") + 1 :]
        assert {e["reason"] for e in after_cancel} <= {
            "result_discarded_after_cancel",
            "late_provider_event",
        }
        assert not any(e["applied"] for e in after_cancel)
        assert [e["actor"] for e in after_cancel if e["reason"] != "late_provider_event"] == [
            "reconciler"
        ]
