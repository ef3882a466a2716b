"""The provider's request id of the attempt that succeeded (OpenAI `x-request-id`, Anthropic
`request-id`), on GET /v1/jobs/{id}: a job run against the realistic simulator over HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from jobgate.config import ProviderConfig, Settings
from jobgate.process.runtime import Runtime
from jobgate.providers.anthropic import AnthropicProvider
from jobgate.providers.openai import OpenAIProvider
from jobgate.providers.registry import ProviderRegistry
from jobgate.providers.simulated import SimProvider
from jobgate.simulator.server import Simulator
from jobgate.storage.protocol import Storage
from jobgate.testing import FakeClock, SequentialIds
from tests.api_server import Api
from tests.http.test_dashboard import signed_in

pytestmark = pytest.mark.asyncio

OPENAI_JOB: dict[str, Any] = {
    "endpoint": "/v1/chat/completions",
    "body": {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "hello"}]},
}
OPENAI_RESPONSES_JOB: dict[str, Any] = {
    "endpoint": "/v1/responses",
    "body": {"model": "gpt-4.1-mini", "input": "hello"},
}
ANTHROPIC_JOB: dict[str, Any] = {
    "endpoint": "/v1/messages",
    "body": {
        "model": "claude-sim",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "hello"}],
    },
}


@pytest.fixture
async def simulator() -> AsyncIterator[Simulator]:
    async with Simulator() as sim:
        yield sim


@pytest.fixture
def seen_ids() -> list[str]:
    """The request ids the simulator answered with, as the adapters' clients received them."""
    return []


@pytest.fixture
async def runtime(
    storage: Storage,
    settings: Settings,
    clock: FakeClock,
    simulator: Simulator,
    seen_ids: list[str],
) -> AsyncIterator[Runtime]:
    configs = {
        "sim": ProviderConfig(kind="sim", model_prefixes=("sim-",)),
        "openai": ProviderConfig(
            kind="openai", base_url=simulator.openai_base_url, model_prefixes=("gpt-",)
        ),
        "anthropic": ProviderConfig(
            kind="anthropic", base_url=simulator.anthropic_base_url, model_prefixes=("claude-",)
        ),
    }
    openai = OpenAIProvider("openai", configs["openai"])
    anthropic = AnthropicProvider("anthropic", configs["anthropic"])

    async def note(response: httpx.Response) -> None:
        seen = response.headers.get("x-request-id") or response.headers.get("request-id")
        if seen:
            seen_ids.append(seen)

    for provider in (openai, anthropic):
        provider._client.event_hooks["response"].append(note)
    registry = ProviderRegistry(
        {"sim": SimProvider("sim", clock=clock), "openai": openai, "anthropic": anthropic},
        configs=configs,
        default="sim",
    )
    yield Runtime(settings, storage=storage, clock=clock, ids=SequentialIds(), providers=registry)
    await openai.aclose()
    await anthropic.aclose()


def streamed(job: dict[str, Any]) -> dict[str, Any]:
    """The job with live output: the adapter streams from its provider."""
    return {**job, "stream": True}


JOBS = {
    "openai-chat": OPENAI_JOB,
    "openai-chat-streamed": streamed(OPENAI_JOB),
    "openai-responses": OPENAI_RESPONSES_JOB,
    "openai-responses-streamed": streamed(OPENAI_RESPONSES_JOB),
    "anthropic-messages": ANTHROPIC_JOB,  # always streamed from Anthropic
}


@pytest.mark.parametrize("job", JOBS.values(), ids=JOBS.keys())
async def test_a_succeeded_job_shows_the_providers_request_id(
    api: Api, seen_ids: list[str], job: dict[str, Any]
) -> None:
    key = await api.key("acme")
    headers = {"Authorization": f"Bearer {key}"}
    submitted = (await api.http.post("/v1/jobs", json=job, headers=headers)).json()
    assert submitted["provider_request_id"] is None  # nothing was sent yet
    await api.runtime.worker().run_once()
    shown = (await api.http.get(f"/v1/jobs/{submitted['id']}", headers=headers)).json()
    assert shown["status"] == "succeeded"
    assert len(seen_ids) == 1 and seen_ids[0].startswith("req_")
    assert shown["provider_request_id"] == seen_ids[0]
    assert "request_id" not in shown["result"]  # the result stays the provider's body
    await signed_in(api)
    page = (await api.http.get(f"/dashboard/jobs/{submitted['id']}")).text
    assert f'id="provider-request-id">{seen_ids[0]}</dd>' in page
