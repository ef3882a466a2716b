"""/metrics after a scripted scenario: the values an operator alerts on are right."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client.parser import text_string_to_metric_families

from jobgate import errors
from jobgate.testing import Fail, FakeClock, ScriptedProvider
from tests.api_server import Api

CHAT = "/v1/chat/completions"


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(text: str, name: str, **labels: str) -> float:
    return samples(text).get((name, tuple(sorted(labels.items()))), 0.0)


async def test_metrics_need_an_operator_key(api: Api) -> None:
    assert (await api.http.get("/metrics")).status_code == 401
    tenant_key = await api.key("acme")
    denied = await api.http.get("/metrics", headers={"Authorization": f"Bearer {tenant_key}"})
    assert denied.status_code == 401


async def test_metrics_after_a_scripted_scenario(
    api: Api, scripted: ScriptedProvider, clock: FakeClock
) -> None:
    operator = {"Authorization": f"Bearer {await api.runtime.operators.create('ops')}"}
    before = (await api.http.get("/metrics", headers=operator)).text
    key = await api.key("acme")
    headers = {"Authorization": f"Bearer {key}"}
    body = {"model": "sim-echo", "messages": [{"role": "user", "content": "hi"}]}
    for _ in range(2):  # two jobs that succeed
        await api.http.post("/v1/jobs", json={"endpoint": CHAT, "body": body}, headers=headers)
    await api.runtime.worker().run_once()
    scripted.script.append(Fail(errors.ProviderRetryable("upstream down", status_code=503)))
    await api.http.post(
        "/v1/jobs",
        headers=headers,
        json={"endpoint": CHAT, "body": body, "provider": "scripted", "max_attempts": 1},
    )
    await api.runtime.worker().run_once()  # dead-lettered
    for _ in range(3):  # three that wait
        await api.http.post("/v1/jobs", json={"endpoint": CHAT, "body": body}, headers=headers)
    await asyncio.sleep(0.3)  # the queue ages (PostgreSQL's clock)...
    clock.advance(5)  # ...and SQLite's, which is the fake clock; gauges refresh every 2 s
    after = (await api.http.get("/metrics", headers=operator)).text

    assert value(after, "jobgate_jobs", tenant="acme", state="queued") == 3
    assert value(after, "jobgate_jobs", tenant="acme", state="running") == 0
    assert value(after, "jobgate_jobs_dead_lettered", tenant="acme") == 1
    assert value(after, "jobgate_queue_oldest_age_seconds", tenant="acme") >= 0.25
    assert (
        value(after, "jobgate_queue_wait_seconds_count", tenant="acme")
        - value(before, "jobgate_queue_wait_seconds_count", tenant="acme")
        == 3
    )
    calls = value(
        after, "jobgate_provider_call_seconds_count", provider="sim", outcome="succeeded"
    ) - value(before, "jobgate_provider_call_seconds_count", provider="sim", outcome="succeeded")
    assert calls == 2
    failed = value(
        after, "jobgate_provider_call_seconds_count", provider="scripted", outcome="server_error"
    ) - value(
        before, "jobgate_provider_call_seconds_count", provider="scripted", outcome="server_error"
    )
    assert failed == 1
    assert (
        value(after, "jobgate_job_transitions_total", to_state="succeeded")
        - value(before, "jobgate_job_transitions_total", to_state="succeeded")
        == 2
    )
    assert (
        value(after, "jobgate_attempts_total", provider="scripted", verdict="attempts_exhausted")
        >= 1
    )
    assert value(after, "jobgate_provider_breaker_state", provider="sim") == 0
    assert "jobgate_reaper_reclaimed_per_pass_bucket" in after
    assert "jobgate_webhook_attempt_seconds_bucket" in after


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_reaper_passes_are_measured(backend: str, api: Api) -> None:
    from prometheus_client import REGISTRY

    before = REGISTRY.get_sample_value("jobgate_reaper_reclaimed_per_pass_count") or 0
    await api.runtime.reaper().reap_once()
    assert REGISTRY.get_sample_value("jobgate_reaper_reclaimed_per_pass_count") == before + 1
