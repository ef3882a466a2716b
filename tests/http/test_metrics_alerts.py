"""The series the shipped alerts read, as /metrics reports them after a scripted
scenario: failing webhook endpoints, tokens today against budgets, the queue-wait histogram
by tenant, redrives."""

from __future__ import annotations

from datetime import timedelta

import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from jobgate import errors
from jobgate.http.routes import metrics
from jobgate.storage.records import DeliveryOutcome, LimitOverrides
from jobgate.testing import Fail, FakeClock, ScriptedProvider
from tests.api_server import Api
from tests.storage.webhook_helpers import make_endpoint

CHAT = "/v1/chat/completions"
BODY = {"model": "sim-echo", "messages": [{"role": "user", "content": "hi"}]}
FAILED = DeliveryOutcome(
    state="pending", attempted=True, status_code=503, latency_ms=5, error="HTTP 503", retry_in_s=1
)


def samples(text: str, name: str) -> dict[str, float]:
    return {
        sample.labels.get("tenant", sample.labels.get("how", "")): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    }


async def test_alert_series_after_a_scripted_scenario(
    api: Api, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(metrics._Gauges, "refreshed_at", -1e18)  # another test's refresh
    storage = api.runtime.storage
    operator = {"Authorization": f"Bearer {await api.runtime.operators.create('ops')}"}
    acme_key = await api.key("acme")
    await api.key("idle")
    acme = await storage.tenant_get(name="acme")
    assert acme is not None
    await storage.tenant_limits_set(
        tenant_id=acme.id,
        overrides=LimitOverrides(daily_token_budget=1000, daily_cost_budget_usd=5.0),
    )
    api.runtime.limits.invalidate()
    await make_endpoint(storage, acme, clock)
    headers = {"Authorization": f"Bearer {acme_key}"}
    response = await api.http.post(
        "/v1/jobs", json={"endpoint": CHAT, "body": BODY}, headers=headers
    )
    job_id = response.json()["id"]
    [done] = await api.runtime.worker().run_once()
    assert done is not None
    [usage] = await storage.usage_for_job(job_id=job_id)
    # The endpoint refuses three times: its delivery stays pending after 3 failed attempts.
    moment = await storage.database_now()
    for _ in range(3):
        moment += timedelta(seconds=2)
        [delivery] = await storage.delivery_claim_due(limit=5, lease_s=30, now=moment)
        assert await storage.delivery_record(delivery=delivery, outcome=FAILED, now=moment)

    text = (await api.http.get("/metrics", headers=operator)).text
    assert samples(text, "jobgate_webhook_endpoints_failing") == {"acme": 1, "idle": 0}
    assert samples(text, "jobgate_tenant_tokens_today") == {
        "acme": usage.input_tokens + usage.output_tokens,
        "idle": 0,
    }
    assert samples(text, "jobgate_tenant_daily_token_budget") == {"acme": 1000}
    assert samples(text, "jobgate_tenant_daily_cost_budget_usd") == {"acme": 5.0}
    assert samples(text, "jobgate_queue_wait_seconds_count")["acme"] >= 1


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_redrives_are_counted_single_and_bulk(
    backend: str, api: Api, scripted: ScriptedProvider
) -> None:
    def redrives(how: str) -> float:
        return REGISTRY.get_sample_value("jobgate_job_redrives_total", {"how": how}) or 0

    key = await api.key("acme")
    headers = {"Authorization": f"Bearer {key}"}
    body = {"endpoint": CHAT, "body": BODY, "provider": "scripted", "max_attempts": 1}
    ids = []
    for _ in range(2):  # dead-lettered: its only attempt fails
        scripted.script.append(Fail(errors.ProviderRetryable("down", status_code=503)))
        ids.append((await api.http.post("/v1/jobs", json=body, headers=headers)).json()["id"])
        await api.runtime.worker().run_once()
    single, bulk = redrives("single"), redrives("bulk")
    assert (await api.http.post(f"/v1/jobs/{ids[0]}/retry", headers=headers)).status_code == 202
    answer = await api.http.post("/v1/jobs/bulk_redrive", json={}, headers=headers)
    assert answer.json()["changed"] == 1
    assert (redrives("single") - single, redrives("bulk") - bulk) == (1, 1)
