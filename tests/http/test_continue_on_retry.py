"""`"on_retry": "continue"` on both backends, through the worker: a stream cut at 60 % goes on
from its durable partial output and ends with exactly the uncut text, billed for both attempts,
the upstream sent the partial as an assistant prefix (the in-process simulator, an
OpenAI-compatible server configured with `assistant_prefill`, Anthropic Messages on the
simulator server); a provider that takes no prefix starts over with `output.reset`; the feed
announces the continuation and both kinds of client end with the right text; the option is
refused where it cannot apply."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from jobgate.client._plans import OutputReader
from jobgate.client.sse import ServerSentEvent
from jobgate.config import ProviderConfig, Settings
from jobgate.process.runtime import Runtime
from jobgate.providers.anthropic import AnthropicProvider
from jobgate.providers.openai import OpenAIProvider
from jobgate.providers.registry import ProviderRegistry
from jobgate.providers.simulated import SimProvider
from jobgate.simulator.server import Simulator
from jobgate.storage.protocol import Storage
from jobgate.testing import FakeClock, SequentialIds
from jobgate.wire.content import output_text
from tests.api_server import Api

pytestmark = pytest.mark.asyncio
CUT = {"fail_with": "stream_server_error", "fail_times": 1, "cut_at": 0.6, "chunks": 10}
PROMPT = "a long answer that drops at sixty percent and goes on"
UNCUT = f"echo: {PROMPT}"


@pytest.fixture
async def simulator() -> AsyncIterator[Simulator]:
    async with Simulator() as sim:
        yield sim


@pytest.fixture
async def runtime(
    storage: Storage, settings: Settings, clock: FakeClock, simulator: Simulator
) -> AsyncIterator[Runtime]:
    configs = {
        "sim": ProviderConfig(kind="sim", model_prefixes=("sim-",)),
        "prefill": ProviderConfig(
            kind="openai", base_url=simulator.openai_base_url, assistant_prefill=True
        ),
        "plain": ProviderConfig(kind="openai", base_url=simulator.openai_base_url),
        "anthropic": ProviderConfig(kind="anthropic", base_url=simulator.anthropic_base_url),
    }
    adapters: dict[str, OpenAIProvider | AnthropicProvider] = {
        "prefill": OpenAIProvider("prefill", configs["prefill"]),
        "plain": OpenAIProvider("plain", configs["plain"]),
        "anthropic": AnthropicProvider("anthropic", configs["anthropic"]),
    }
    registry = ProviderRegistry(
        {"sim": SimProvider("sim", clock=clock), **adapters}, configs=configs, default="sim"
    )
    yield Runtime(settings, storage=storage, clock=clock, ids=SequentialIds(), providers=registry)
    for adapter in adapters.values():
        await adapter.aclose()


def _chat(model: str, **job: Any) -> dict[str, Any]:
    body = {"model": model, "messages": [{"role": "user", "content": PROMPT}], "sim": CUT}
    return {"endpoint": "/v1/chat/completions", "body": body, "stream": True, **job}


def _messages(**job: Any) -> dict[str, Any]:
    body = {
        "model": "claude-sim",
        "max_tokens": 256,
        "messages": [{"role": "user", "content": PROMPT}],
        "sim": CUT,
    }
    return {"endpoint": "/v1/messages", "body": body, "stream": True, **job}


_KEYS: dict[int, str] = {}


async def _headers(api: Api) -> dict[str, str]:
    """The one tenant's key of this test's API."""
    if id(api) not in _KEYS:
        _KEYS[id(api)] = await api.key("acme")
    return {"Authorization": f"Bearer {_KEYS[id(api)]}"}


async def _run(api: Api, clock: FakeClock, job: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Submit `job` (continue on retry, two attempts), run its cut attempt and its retry."""
    headers = await _headers(api)
    job = {"on_retry": "continue", "max_attempts": 2, **job}
    answer = await api.http.post("/v1/jobs", json=job, headers=headers)
    assert answer.status_code == 202, answer.text
    job_id = answer.json()["id"]
    worker = api.runtime.worker()
    await worker.run_once()  # the cut attempt
    clock.advance(5)  # past the retry's backoff (SQLite: this clock; PostgreSQL: its own)
    deadline = time.monotonic() + 30
    while True:
        await worker.run_once()
        shown = (await api.http.get(f"/v1/jobs/{job_id}", headers=headers)).json()
        if shown["status"] != "queued" or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)  # PostgreSQL's clock reaches the retry's run_at
    assert shown["status"] == "succeeded", orjson.dumps(shown).decode()
    assert shown["attempt"] == 2
    return job_id, shown


async def _feed(api: Api, job_id: str) -> list[ServerSentEvent]:
    headers = await _headers(api)
    events = []
    async with api.http.stream("GET", f"/v1/jobs/{job_id}/stream", headers=headers) as answer:
        event, data = "message", ""
        async for line in answer.aiter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                data = line[6:]
            elif line == "" and data:
                events.append(ServerSentEvent(event=event, data=data, id=None))
                event, data = "message", ""
    return events


def _texts(events: list[ServerSentEvent]) -> tuple[str, str]:
    """What a client that replaces its text on every reset ends with, and what one that keeps
    the continued characters does, through the Python client's reader."""
    reader = OutputReader(0)
    replaced = kept = ""
    for sse in events:
        delta = reader.read(sse)
        if delta is None:
            continue
        if delta.reset:
            replaced = ""
            n = delta.continued_chars
            kept = kept[:n] + delta[n:]
        else:
            kept += delta
        replaced += delta
    return replaced, kept


def _bodies(simulator: Simulator, path: str) -> list[dict[str, Any]]:
    return [r.body for r in simulator.engine.requests if r.path == path and r.body is not None]


async def _generations(storage: Storage, job_id: str) -> dict[int, str]:
    texts: dict[int, str] = {}
    for chunk in await storage.job_output_read(job_id=job_id):
        texts[chunk.generation] = texts.get(chunk.generation, "") + chunk.text
    return texts


async def test_a_cut_stream_continues_to_exactly_the_uncut_text(api: Api, clock: FakeClock) -> None:
    job_id, shown = await _run(api, clock, _chat("sim-echo"))
    assert shown["result"]["choices"][0]["message"]["content"] == UNCUT
    logs = await _generations(api.runtime.storage, job_id)
    partial = logs[1]
    assert 0 < len(partial) < len(UNCUT) and UNCUT.startswith(partial)
    assert logs[2] == UNCUT  # the latest generation holds the whole answer
    events = await _feed(api, job_id)
    (reset,) = [orjson.loads(e.data) for e in events if e.event == "output.reset"]
    assert reset["continued_chars"] == len(partial.rstrip())
    assert _texts(events) == (UNCUT, UNCUT)
    assert events[-1].event == "job.succeeded"


async def test_a_cut_responses_stream_continues_to_exactly_the_uncut_text(
    api: Api, clock: FakeClock
) -> None:
    body = {"model": "sim-echo", "input": PROMPT, "sim": CUT}
    job = {"endpoint": "/v1/responses", "body": body, "stream": True}
    job_id, shown = await _run(api, clock, job)
    assert output_text(shown["result"]) == UNCUT
    logs = await _generations(api.runtime.storage, job_id)
    assert 0 < len(logs[1]) < len(UNCUT) and logs[2] == UNCUT
    assert _texts(await _feed(api, job_id)) == (UNCUT, UNCUT)


async def test_both_attempts_are_billed(api: Api, clock: FakeClock) -> None:
    job_id, shown = await _run(api, clock, _chat("sim-echo"))
    partial = (await _generations(api.runtime.storage, job_id))[1].rstrip()
    prompt_tokens = -(-len(PROMPT) // 4)
    partial_tokens = -(-len(partial) // 4)
    rest_tokens = -(-(len(UNCUT) - len(partial)) // 4)
    assert shown["usage"]["input_tokens"] == (prompt_tokens + partial_tokens) + prompt_tokens
    assert shown["usage"]["output_tokens"] == rest_tokens + partial_tokens
    (ledger,) = await api.runtime.storage.usage_for_job(job_id=job_id)
    assert ledger.output_tokens == rest_tokens + partial_tokens


async def test_an_openai_compatible_server_with_prefill_gets_the_partial(
    api: Api, clock: FakeClock, simulator: Simulator
) -> None:
    _, shown = await _run(api, clock, _chat("gpt-4.1-mini", provider="prefill"))
    assert shown["result"]["choices"][0]["message"]["content"] == UNCUT
    first, second = _bodies(simulator, "/v1/chat/completions")
    assert first["messages"] == [{"role": "user", "content": PROMPT}]
    assert "on_retry" not in first and "on_retry" not in second  # jobgate's own member
    *asked, prefix = second["messages"]
    assert asked == first["messages"]
    assert prefix["role"] == "assistant"
    assert 0 < len(prefix["content"]) < len(UNCUT) and UNCUT.startswith(prefix["content"])
    assert prefix["content"] == prefix["content"].rstrip()


async def test_anthropic_gets_a_prefill_without_trailing_whitespace(
    api: Api, clock: FakeClock, simulator: Simulator
) -> None:
    job_id, shown = await _run(api, clock, _messages(provider="anthropic"))
    text = "".join(b["text"] for b in shown["result"]["content"] if b["type"] == "text")
    assert text == UNCUT
    _, second = _bodies(simulator, "/v1/messages")
    prefill = second["messages"][-1]
    assert prefill["role"] == "assistant" and prefill["content"] == prefill["content"].rstrip()
    assert (await _generations(api.runtime.storage, job_id))[2] == UNCUT


async def test_a_provider_without_prefill_starts_over_with_a_reset(
    api: Api, clock: FakeClock, simulator: Simulator
) -> None:
    job_id, shown = await _run(api, clock, _chat("gpt-4.1-mini", provider="plain"))
    assert shown["result"]["choices"][0]["message"]["content"] == UNCUT
    first, second = _bodies(simulator, "/v1/chat/completions")
    assert second["messages"] == first["messages"]  # no prefix: asked again from the start
    events = await _feed(api, job_id)
    (reset,) = [orjson.loads(e.data) for e in events if e.event == "output.reset"]
    assert "continued_chars" not in reset
    assert _texts(events) == (UNCUT, UNCUT)


@pytest.mark.parametrize(
    ("job", "says"),
    [
        (_chat("sim-echo", stream=False), "streaming jobs only"),
        ({**_chat("sim-echo"), "endpoint": "/v1/embeddings"}, "not '/v1/embeddings'"),
        ({**_chat("sim-echo"), "on_retry": "resume"}, "on_retry"),
    ],
)
async def test_the_option_is_refused_where_it_cannot_apply(
    api: Api, job: dict[str, Any], says: str
) -> None:
    headers = await _headers(api)
    job = {"on_retry": "continue", **job}
    answer = await api.http.post("/v1/jobs", json=job, headers=headers)
    assert answer.status_code == 400, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert says in answer.text
    assert "on_retry" in answer.text


# -- POST /v1/responses ------------------------------------------------------------------------


async def _create_response(api: Api, body: dict[str, Any]) -> str:
    """A streamed background create's response id, read from its first event (the response
    goes on in the background once the stream is left)."""
    headers = await _headers(api)
    async with api.http.stream("POST", "/v1/responses", json=body, headers=headers) as answer:
        assert answer.status_code == 200, await answer.aread()
        async for line in answer.aiter_lines():
            if line.startswith("data: "):
                return str(orjson.loads(line[6:])["response"]["id"])
    raise AssertionError("the stream ended before its first event")


async def test_a_responses_create_continues_on_retry(api: Api, clock: FakeClock) -> None:
    body = {
        "model": "sim-echo",
        "input": PROMPT,
        "sim": CUT,
        "background": True,
        "stream": True,
        "on_retry": "continue",
    }
    response_id = await _create_response(api, body)
    worker = api.runtime.worker()
    await worker.run_once()  # the cut attempt
    clock.advance(30)  # past the retry's backoff (SQLite: this clock; PostgreSQL: its own)
    headers = await _headers(api)
    deadline = time.monotonic() + 30
    while True:
        await worker.run_once()
        shown = (await api.http.get(f"/v1/jobs/{response_id}", headers=headers)).json()
        if shown["status"] != "queued" or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    assert shown["status"] == "succeeded" and shown["attempt"] == 2, orjson.dumps(shown).decode()
    logs = await _generations(api.runtime.storage, response_id)
    assert 0 < len(logs[1]) < len(UNCUT) and logs[2] == UNCUT  # continued, not started over
    answer = await api.http.get(f"/v1/responses/{response_id}", headers=headers)
    assert output_text(answer.json()) == UNCUT
    assert "on_retry" not in answer.json()  # jobgate's own member is not echoed


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"background": True, "on_retry": "continue"}, "streaming jobs only"),
        ({"stream": True, "on_retry": "resume"}, "on_retry"),
        ({"stream": True, "on_retry": 1}, "on_retry"),
    ],
)
async def test_a_responses_create_refuses_on_retry_where_it_cannot_apply(
    api: Api, fields: dict[str, Any], says: str
) -> None:
    body = {"model": "sim-echo", "input": PROMPT, **fields}
    answer = await api.http.post("/v1/responses", json=body, headers=await _headers(api))
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == "on_retry" and says in error["message"], error
