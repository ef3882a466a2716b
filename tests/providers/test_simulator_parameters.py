"""The simulator refuses a parameter its API does not know, as the provider does (OpenAI Chat
Completions "Unrecognized request argument supplied", Responses `unknown_parameter`, Anthropic
"Extra inputs are not permitted"), server and in-process alike; the lenient profile does not.
Its lists are the official SDKs' create parameters."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
from anthropic.types import message_create_params
from openai.types.chat import completion_create_params
from openai.types.responses import response_create_params

from jobgate import errors
from jobgate.providers.simulated import SimProvider
from jobgate.simulator import parameters, profiles
from jobgate.simulator.server import Simulator

HI: Any = [{"role": "user", "content": "hi"}]


def _keys(params: Any) -> set[str]:
    return set(params.__required_keys__) | set(params.__optional_keys__)


def test_the_lists_are_the_sdks_create_parameters() -> None:
    chat = _keys(completion_create_params.CompletionCreateParamsStreaming)
    assert parameters.CHAT_COMPLETIONS == chat
    responses = _keys(response_create_params.ResponseCreateParamsStreaming)
    assert parameters.RESPONSES == responses
    messages = _keys(message_create_params.MessageCreateParamsStreaming)
    assert parameters.MESSAGES == messages


@pytest.fixture
async def oai(simulator: Simulator) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(
        base_url=simulator.openai_base_url, api_key="sk", max_retries=0,
        _strict_response_validation=True,
    ) as client:  # fmt: skip
        yield client


@pytest.fixture
async def claude(simulator: Simulator) -> AsyncIterator[anthropic.AsyncAnthropic]:
    async with anthropic.AsyncAnthropic(
        base_url=simulator.anthropic_base_url, api_key="sk", max_retries=0,
        _strict_response_validation=True,
    ) as client:  # fmt: skip
        yield client


async def test_chat_completions_refuse_an_unknown_argument(oai: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        await oai.chat.completions.create(model="m", messages=HI, extra_body={"top_k": 5})
    error = refused.value
    assert error.body == {
        "message": "Unrecognized request argument supplied: top_k",
        "type": "invalid_request_error",
        "param": None,
        "code": None,
    }
    ok = await oai.chat.completions.create(model="m", messages=HI, seed=1, n=1, stop=["x"])
    assert ok.choices[0].message.content == "echo: hi"


async def test_responses_refuse_an_unknown_parameter(oai: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        await oai.responses.create(model="m", input="hi", extra_body={"max_tokens": 5})
    assert refused.value.code == "unknown_parameter" and refused.value.param == "max_tokens"
    assert refused.value.body["message"] == "Unknown parameter: 'max_tokens'."  # type: ignore[index]
    ok = await oai.responses.create(model="m", input="hi", truncation="auto", store=True)
    assert ok.output_text == "echo: hi"


async def test_messages_refuse_extra_inputs(claude: anthropic.AsyncAnthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as refused:
        await claude.messages.create(
            model="c", max_tokens=10, messages=HI, extra_body={"temperature": 0.2}
        )
    assert refused.value.body["error"] == {  # type: ignore[index]
        "type": "invalid_request_error",
        "message": "temperature: Extra inputs are not permitted",
    }


async def test_a_batch_request_with_an_extra_input_is_refused(simulator: Simulator) -> None:
    params = {"model": "c", "max_tokens": 10, "messages": HI, "top_k": 3}
    async with httpx.AsyncClient(base_url=simulator.url) as client:
        answer = await client.post(
            "/v1/messages/batches",
            json={"requests": [{"custom_id": "a", "params": params}]},
            headers={"anthropic-version": "2023-06-01"},
        )
    assert answer.status_code == 400
    assert answer.json()["error"]["message"] == (
        "requests.0.params.top_k: Extra inputs are not permitted"
    )


async def test_the_lenient_profile_takes_anything() -> None:
    async with Simulator(profile=profiles.LENIENT) as lenient:
        async with httpx.AsyncClient(base_url=lenient.url) as client:
            answer = await client.post(
                "/v1/chat/completions", json={"model": "m", "messages": HI, "top_k": 5}
            )
    assert answer.status_code == 200


def test_the_in_process_provider_refuses_unknown_parameters_at_submit() -> None:
    provider = SimProvider()
    provider.validate("/v1/chat/completions", {"model": "sim-echo", "messages": HI, "sim": {}})
    with pytest.raises(errors.InvalidRequest) as refused:
        provider.validate("/v1/chat/completions", {"model": "sim-echo", "messages": HI, "k": 1})
    assert refused.value.param == "body.k" and refused.value.code == "unknown_parameter"
    with pytest.raises(errors.InvalidRequest) as refused:
        provider.validate("/v1/responses", {"model": "sim-echo", "input": "x", "max_tokens": 1})
    assert refused.value.param == "body.max_tokens"
