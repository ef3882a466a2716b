"""Model routes, on both backends: a job for `[routes."ALIAS"]` runs on the first
healthy target and its next attempt moves to the next target after a retryable failure; the
events record each attempt's provider and model, and the job shows what finally ran."""

from __future__ import annotations

import asyncio
import socket

import pytest

from jobgate import errors
from jobgate.config import ProviderConfig, RouteConfig, Settings
from jobgate.domain.states import JobState
from jobgate.process.runtime import Runtime
from jobgate.providers.registry import ProviderRegistry
from jobgate.services.jobs import SubmitSpec
from jobgate.storage.postgres.store import is_postgres
from jobgate.storage.protocol import Storage
from jobgate.testing import FakeClock, SequentialIds

pytestmark = pytest.mark.asyncio
CHAT = "/v1/chat/completions"


def refused_url() -> str:
    """A loopback port nobody listens on (connections are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def route_settings(base: Settings, *targets: str) -> Settings:
    down = ProviderConfig(kind="openai", base_url=refused_url(), connect_timeout_s=2)
    return base.model_copy(
        update={"providers": {"down": down}, "routes": {"smart": RouteConfig(targets=targets)}}
    )


async def test_a_refused_first_target_moves_the_job_to_the_second(
    storage: Storage, clock: FakeClock, settings: Settings
) -> None:
    config = route_settings(settings, "down:gpt-4.1-mini", "sim:sim-echo")
    providers = ProviderRegistry.from_settings(config, clock=clock)
    runtime = Runtime(
        config, storage=storage, clock=clock, ids=SequentialIds(), providers=providers
    )
    tenant = (await runtime.tenants.create("acme")).tenant
    body = {"model": "smart", "messages": [{"role": "user", "content": "hi"}]}
    submitted = await runtime.jobs.submit(
        tenant_id=tenant.id, spec=SubmitSpec(endpoint=CHAT, body=body)
    )
    job = submitted.job
    assert (job.provider, job.model, job.model_route) == ("down", "gpt-4.1-mini", "smart")
    worker = runtime.worker()
    (first,) = await worker.run_once()
    assert first is not None and first.state is JobState.QUEUED
    assert (first.provider, first.model) == ("sim", "sim-echo")
    assert first.request is not None and first.request["model"] == "sim-echo"
    clock.advance(1)  # past the retry's backoff (SQLite's clock; PostgreSQL's runs by itself)
    if is_postgres(storage):
        await asyncio.sleep(0.1)
    (second,) = await worker.run_once()
    assert second is not None and second.state is JobState.SUCCEEDED
    assert (second.provider, second.model, second.attempt) == ("sim", "sim-echo", 2)
    events = await storage.job_events(job_id=job.id)
    moves = [e for e in events if e.from_state is JobState.RUNNING and e.to_state is e.from_state]
    assert len(moves) == 1 and moves[0].reason is not None
    assert "on down:gpt-4.1-mini" in moves[0].reason and "next sim:sim-echo" in moves[0].reason
    claims = [e for e in events if e.to_state is JobState.RUNNING and e.reason == "claimed"]
    assert len(claims) == 2


async def test_the_last_target_keeps_retrying_where_it_is(
    storage: Storage, clock: FakeClock, settings: Settings
) -> None:
    config = route_settings(settings, "sim:sim-echo", "down:gpt-4.1-mini")
    providers = ProviderRegistry.from_settings(config, clock=clock)
    assert providers.next_target("smart", "down", "gpt-4.1-mini") is None
    assert providers.next_target("smart", "sim", "sim-echo") == ("down", "gpt-4.1-mini")
    assert providers.first_target("smart") == ("sim", "sim-echo")


async def test_routes_to_unknown_targets_are_refused_at_start(settings: Settings) -> None:
    config = route_settings(settings, "nowhere:gpt-4.1", "sim:sim-echo")
    with pytest.raises(errors.ConfigError):
        ProviderRegistry.from_settings(config, clock=FakeClock())
    with pytest.raises(ValueError, match="provider:model"):
        RouteConfig(targets=("no-colon",))


async def test_a_breaker_another_process_opened_moves_new_jobs_to_the_next_target(
    storage: Storage, clock: FakeClock, settings: Settings
) -> None:
    config = route_settings(settings, "down:gpt-4.1-mini", "sim:sim-echo")
    providers = ProviderRegistry.from_settings(config, clock=clock)
    runtime = Runtime(
        config, storage=storage, clock=clock, ids=SequentialIds(), providers=providers
    )
    tenant = (await runtime.tenants.create("acme")).tenant
    body = {"model": "smart", "messages": [{"role": "user", "content": "hi"}]}
    await storage.breaker_open(provider="down", open_s=60, opened_by="elsewhere")
    submitted = await runtime.jobs.submit(
        tenant_id=tenant.id, spec=SubmitSpec(endpoint=CHAT, body=body)
    )
    assert (submitted.job.provider, submitted.job.model) == ("sim", "sim-echo")
