"""/metrics reports each tenant's spend since UTC midnight, priced with configured prices."""

from __future__ import annotations

from decimal import Decimal

import pytest
from prometheus_client.parser import text_string_to_metric_families

from jobgate.config import ModelPrice, ProviderConfig, Settings
from jobgate.http.routes import metrics
from tests.api_server import Api

CHAT = "/v1/chat/completions"
PRICE = ModelPrice(input_per_mtok=Decimal(1000), output_per_mtok=Decimal(4000))


def spend(text: str) -> dict[str, float]:
    return {
        sample.labels["tenant"]: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "jobgate_tenant_spend_usd_today"
    }


@pytest.fixture
def settings() -> Settings:
    sim = ProviderConfig(kind="sim", model_prefixes=("sim-",), prices={"sim-echo": PRICE})
    return Settings(database_url="sqlite:///unused.db", providers={"sim": sim})


async def test_spend_today_per_tenant(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics._Gauges, "refreshed_at", -1e18)  # another test's refresh
    operator = {"Authorization": f"Bearer {await api.runtime.operators.create('ops')}"}
    headers = {"Authorization": f"Bearer {await api.key('acme')}"}
    await api.key("idle")
    body = {"model": "sim-echo", "messages": [{"role": "user", "content": "hi"}]}
    await api.http.post("/v1/jobs", json={"endpoint": CHAT, "body": body}, headers=headers)
    [done] = await api.runtime.worker().run_once()
    assert done is not None
    [entry] = await api.runtime.storage.usage_for_job(job_id=done.id)
    cost = (entry.input_tokens * 1000 + entry.output_tokens * 4000) / 1_000_000
    assert cost > 0
    text = (await api.http.get("/metrics", headers=operator)).text
    assert spend(text) == {"acme": pytest.approx(cost), "idle": 0}
