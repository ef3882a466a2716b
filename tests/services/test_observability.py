"""Logs and spans: one JSON line per transition with ids, never a key, secret or prompt; an
OpenTelemetry span per submit, claim, provider call and webhook delivery."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from jobgate import errors, logs
from jobgate.process.runtime import Runtime
from jobgate.services.jobs import SubmitSpec
from jobgate.testing import Fail, ScriptedProvider

CHAT = "/v1/chat/completions"
PROMPT = "PLANTED-PROMPT-7f3a: my password is hunter2"


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    logs.configure("debug", stream=stream)
    yield stream
    root.handlers[:], level = saved[0], saved[1]
    root.setLevel(level)


async def test_logs_hold_ids_but_no_secrets_or_prompts(
    runtime: Runtime, scripted: ScriptedProvider, captured: io.StringIO
) -> None:
    issued = await runtime.tenants.create("acme")
    tenant = issued.tenant
    await runtime.tenants.authenticate(issued.api_key)
    body = {"model": "sim-echo", "messages": [{"role": "user", "content": PROMPT}]}
    done = await runtime.jobs.submit(tenant_id=tenant.id, spec=SubmitSpec(endpoint=CHAT, body=body))
    await runtime.worker().run_once()
    scripted.script.append(Fail(errors.ProviderFatal(f"bad request: {PROMPT}")))
    await runtime.jobs.submit(
        tenant_id=tenant.id, spec=SubmitSpec(endpoint=CHAT, body=body, provider="scripted")
    )
    await runtime.worker().run_once()
    with pytest.raises(errors.Unauthorized):
        await runtime.tenants.authenticate("jg_wrong-key-PLANTED")
    await runtime.reaper().reap_once()

    text = captured.getvalue()
    lines = [json.loads(line) for line in text.splitlines()]
    transitions = [line for line in lines if line["message"] == "job transition"]
    assert {(line["job_id"], line["to_state"]) for line in transitions} >= {
        (done.job.id, "queued"),
        (done.job.id, "succeeded"),
    }
    assert all(line["tenant_id"] == tenant.id for line in transitions if "tenant_id" in line)
    for secret in (
        issued.api_key,
        tenant.webhook_secret,
        "PLANTED-PROMPT",
        "hunter2",
        "jg_wrong-key-PLANTED",
    ):
        assert secret not in text


_EXPORTER = InMemorySpanExporter()


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    # A process has one tracer provider: install ours once, then start each test empty.
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    _EXPORTER.clear()
    return _EXPORTER


async def test_spans_carry_the_job_id(runtime: Runtime, exporter: InMemorySpanExporter) -> None:
    tenant = (await runtime.tenants.create("acme")).tenant
    body = {"model": "sim-echo", "messages": [{"role": "user", "content": "hi"}]}
    outcome = await runtime.jobs.submit(
        tenant_id=tenant.id, spec=SubmitSpec(endpoint=CHAT, body=body)
    )
    await runtime.worker().run_once()
    spans = {span.name: span for span in exporter.get_finished_spans()}
    assert {"jobgate.submit", "jobgate.claim", "jobgate.provider_call"} <= set(spans)
    assert (spans["jobgate.submit"].attributes or {})["jobgate.job_id"] == outcome.job.id
    assert (spans["jobgate.provider_call"].attributes or {})["jobgate.job_id"] == outcome.job.id
    assert (spans["jobgate.claim"].attributes or {})["jobgate.claimed"] == 1
