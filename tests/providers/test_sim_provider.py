"""The in-process `sim` provider: Chat Completions and Responses answers valid under the SDK
types, its faults, and background mode on the engine it shares with the simulator server."""

from __future__ import annotations

from typing import Any

import pytest
from openai.types.chat import ChatCompletion
from openai.types.responses import Response

from jobgate import errors
from jobgate.config import Settings, load_settings
from jobgate.providers.anthropic import AnthropicProvider
from jobgate.providers.background import ProviderJobRef, Status, background_for
from jobgate.providers.base import ProviderCall
from jobgate.providers.openai import OpenAIProvider
from jobgate.providers.registry import ProviderRegistry
from jobgate.providers.simulated import CHAT_COMPLETIONS, RESPONSES, SimProvider
from jobgate.testing import FakeClock
from tests.providers.sdk import openai_strict


def call(endpoint: str, body: dict[str, Any], run_count: int = 1) -> ProviderCall:
    return ProviderCall("job_1", "ten_1", endpoint, body, None, 1, run_count, "job_1")


async def test_answers_chat_and_responses() -> None:
    sim = SimProvider(clock=FakeClock())
    chat = await sim.call(
        call(
            CHAT_COMPLETIONS, {"model": "sim-echo", "messages": [{"role": "user", "content": "a"}]}
        )
    )
    openai_strict(ChatCompletion, chat.body)
    body = {"model": "sim-echo", "input": [{"role": "user", "content": "from a list"}]}
    sim.validate(RESPONSES, body)
    answered = await sim.call(call(RESPONSES, body))
    response = openai_strict(Response, answered.body)
    assert response.status == "completed" and "from a list" in response.output_text
    assert answered.usage.output_tokens > 0
    with pytest.raises(errors.InvalidRequest):
        sim.validate(RESPONSES, {"model": "sim-echo"})


class SteppedBackOnce(FakeClock):
    """A wall clock stepped back 5 ms during the first sleep: the sleeps add up to a
    response's latency, the engine's wall clock to 5 ms less."""

    def __init__(self) -> None:
        super().__init__()
        self.stepped = False

    async def sleep(self, seconds: float) -> None:
        await super().sleep(seconds)
        if not self.stepped:
            self.stepped = True
            self.advance(-0.005)


@pytest.mark.parametrize("streamed", [False, True], ids=["call", "stream"])
async def test_a_foreground_response_is_answered_once_the_engine_holds_it_done(
    streamed: bool,
) -> None:
    sim = SimProvider(clock=SteppedBackOnce())
    body = {"model": "sim-echo", "input": "on time", "sim": {"latency_s": 2, "chunks": 4}}
    deltas: list[str] = []

    async def on_delta(piece: str) -> None:
        deltas.append(piece)

    the_call = call(RESPONSES, body)
    answered = await (sim.stream(the_call, on_delta) if streamed else sim.call(the_call))
    response = openai_strict(Response, answered.body)
    assert response.status == "completed" and response.output_text == "echo: on time"
    assert "".join(deltas) == (response.output_text if streamed else "")


async def test_faults_follow_the_run_count() -> None:
    sim = SimProvider(clock=FakeClock())
    body = {
        "model": "sim-echo",
        "input": "x",
        "sim": {"fail_with": "server_error", "fail_times": 1},
    }
    with pytest.raises(errors.ProviderRetryable):
        await sim.call(call(RESPONSES, body, run_count=1))
    assert (await sim.call(call(RESPONSES, body, run_count=2))).body["status"] == "completed"
    dropped = {"model": "sim-echo", "input": "x", "sim": {"fail_with": "drop"}}
    with pytest.raises(errors.ProviderOutcomeUnknown) as caught:
        await sim.call(call(RESPONSES, dropped))
    assert caught.value.safe_to_retry  # in process, nothing can be lost on the way


async def test_background_mode_on_the_shared_engine() -> None:
    clock = FakeClock()
    sim = SimProvider(clock=clock, background=True)
    assert background_for(sim, RESPONSES) is sim and background_for(sim, CHAT_COMPLETIONS) is None
    created = await sim.create(
        call(RESPONSES, {"model": "m", "input": "x", "sim": {"latency_s": 4}})
    )
    assert created.status == Status.QUEUED
    assert created.body["metadata"] == {"jobgate_job_id": "job_1"}
    ref = ProviderJobRef("job_1", created.provider_job_id, RESPONSES, "m")
    clock.advance(5)
    done = await sim.retrieve(ref)
    assert done.status == Status.COMPLETED and done.result is not None
    openai_strict(Response, done.body)


def test_registry_builds_every_kind(tmp_path: object) -> None:
    settings = Settings(
        providers={
            "upstream": {"kind": "openai", "base_url": "http://127.0.0.1:1/v1"},
            "claude": {"kind": "anthropic", "model_prefixes": ["claude-"]},
            "bg": {"kind": "sim", "mode": "background"},
        }
    )
    registry = ProviderRegistry.from_settings(settings, clock=FakeClock())
    assert isinstance(registry.get("upstream"), OpenAIProvider)
    claude, model = registry.route(None, "claude-sim")
    assert isinstance(claude, AnthropicProvider) and model == "claude-sim"
    assert background_for(registry.get("bg"), RESPONSES) is not None


def test_provider_settings_from_toml(tmp_path: pytest.TempPathFactory) -> None:
    path = tmp_path / "jobgate.toml"  # type: ignore[operator]
    path.write_text(
        '[providers.upstream]\nkind = "openai"\nbase_url = "http://127.0.0.1:9100/v1"\n'
        'mode = "background"\nidempotent_creates = true\nreconcile_after_s = 2\n'
        'breaker_failure_threshold = 3\n[providers.upstream.headers]\n"X-Title" = "jobgate"\n'
    )
    settings = load_settings({}, config_path=path)
    config = settings.providers["upstream"]
    assert config.mode == "background" and config.idempotent_creates
    assert config.headers == {"X-Title": "jobgate"} and config.breaker_failure_threshold == 3
