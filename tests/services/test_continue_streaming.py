"""Continue on retry, worker side, against a fake log: the prefix a retry sends (and when it
sends none), the first chunk that says how much it repeats, the answer put back together with
both attempts' usage, and a provider's error that still writes what arrived before it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from jobgate import errors
from jobgate.config import ProviderConfig
from jobgate.domain.states import JobState
from jobgate.providers.base import ProviderCall, ProviderResult, Usage
from jobgate.providers.openai import OpenAIProvider
from jobgate.providers.simulated import SimProvider
from jobgate.providers.streaming import DeltaSink
from jobgate.roles import output_stream
from jobgate.storage.records import OutputChunk
from tests.domain.test_responses_domain import make_job
from tests.roles.test_output_stream import FakeLog, _batcher

pytestmark = pytest.mark.asyncio
CHAT = "/v1/chat/completions"
ASKED = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


class Continuing:
    """Streams `pieces` (raising `fails` after them, if set), answering only what it streamed:
    a provider that continues a trailing assistant message."""

    name = "continuing"
    kind = "sim"

    def __init__(self, pieces: list[str], fails: errors.ProviderError | None = None) -> None:
        self.pieces = pieces
        self.fails = fails
        self.calls: list[ProviderCall] = []

    def validate(self, endpoint: str, body: dict[str, Any]) -> None:
        return None

    async def call(self, call: ProviderCall) -> ProviderResult:
        raise AssertionError("streamed only")

    async def aclose(self) -> None:
        return None

    def streams(self, endpoint: str) -> bool:
        return True

    def prefills(self, endpoint: str) -> bool:
        return True

    async def stream(self, call: ProviderCall, on_delta: DeltaSink) -> ProviderResult:
        self.calls.append(call)
        for piece in self.pieces:
            await on_delta(piece)
        if self.fails is not None:
            raise self.fails
        text = "".join(self.pieces)
        body = {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}
        return ProviderResult(body=body, usage=Usage(10, 2))


def _call() -> ProviderCall:
    return ProviderCall("job_1", "ten_1", CHAT, dict(ASKED), "m", 2, 2, "job_1")


def _job(run_count: int, **request: Any) -> Any:
    return make_job(
        JobState.RUNNING,
        id="job_1",
        endpoint=CHAT,
        run_count=run_count,
        request={**ASKED, "stream": True, **request},
    )


def _log(*generations: tuple[int, str]) -> FakeLog:
    log = FakeLog()
    at = datetime.now(UTC)
    log.chunks = [
        OutputChunk("job_1", seq, generation, text, at)
        for seq, (generation, text) in enumerate(generations, 1)
    ]
    return log


async def test_a_retry_continues_from_the_latest_attempts_text_without_trailing_space() -> None:
    log = _log((1, "abandoned"), (2, "Hello, "), (2, "wor "))
    job = _job(3, on_retry="continue")
    assert await output_stream.continuing_prefix(log, job, Continuing([])) == "Hello, wor"


@pytest.mark.parametrize(
    ("job", "provider"),
    [
        (_job(1, on_retry="continue"), Continuing([])),  # a first attempt
        (_job(2), Continuing([])),  # restart, the default
        (_job(2, on_retry="restart"), Continuing([])),
    ],
)
async def test_no_prefix_unless_a_retry_asked_for_it(job: Any, provider: Any) -> None:
    assert await output_stream.continuing_prefix(_log((1, "Hello")), job, provider) == ""


async def test_the_simulator_continues_chat_and_responses() -> None:
    job = _job(2, on_retry="continue")
    assert await output_stream.continuing_prefix(_log((1, "Hello")), job, SimProvider()) == "Hello"
    request = {"input": "x", "stream": True, "on_retry": "continue"}
    response = make_job(JobState.RUNNING, id="job_1", run_count=2, request=request)
    assert await output_stream.continuing_prefix(_log((1, "Hi")), response, SimProvider()) == "Hi"


async def test_an_openai_compatible_server_continues_only_when_configured() -> None:
    log = _log((1, "Hello"))
    job = _job(2, on_retry="continue")
    plain = OpenAIProvider("plain", ProviderConfig(kind="openai"))
    prefill = OpenAIProvider("prefill", ProviderConfig(kind="openai", assistant_prefill=True))
    try:
        assert await output_stream.continuing_prefix(log, job, plain) == ""
        assert await output_stream.continuing_prefix(log, job, prefill) == "Hello"
    finally:
        await plain.aclose()
        await prefill.aclose()


async def test_an_unreadable_log_starts_over() -> None:
    class Down(FakeLog):
        async def job_output_read(self, **_: Any) -> list[OutputChunk]:
            raise errors.StorageUnavailable("down")

    job = _job(2, on_retry="continue")
    assert await output_stream.continuing_prefix(Down(), job, Continuing([])) == ""


async def test_a_long_log_is_read_page_by_page() -> None:
    log = _log(*[(1, "x")] * 1500, (2, "y"))
    assert await output_stream.latest_text(log, job_id="job_1", before=2) == "x" * 1500
    assert await output_stream.latest_text(log, job_id="job_1", before=3) == "y"


async def test_a_continuation_is_asked_with_the_prefix_and_answers_the_whole_text() -> None:
    log = FakeLog()
    provider = Continuing(["ld", "!"])
    batcher = _batcher(log, continued_chars=len("Hello, wor"))
    result = await output_stream.call_streaming(provider, _call(), batcher, prefix="Hello, wor")
    (sent,) = provider.calls
    assert sent.body["messages"][-1] == {"role": "assistant", "content": "Hello, wor"}
    assert "".join(c.text for c in log.chunks) == "Hello, world!"
    assert log.chunks[0].text.startswith("Hello, wor")
    assert log.chunks[0].continued_chars == len("Hello, wor")
    assert all(c.continued_chars == 0 for c in log.chunks[1:])
    assert result.body["choices"][0]["message"]["content"] == "Hello, world!"
    # The cut attempt read the prompt (10 - 3 prefix tokens) and wrote the prefix (3 tokens).
    assert result.usage == Usage(10 + 7, 2 + 3)


async def test_a_provider_error_still_writes_what_arrived() -> None:
    log = FakeLog()
    cut = errors.ProviderRetryable("server error", status_code=500)
    with pytest.raises(errors.ProviderRetryable):
        await output_stream.call_streaming(Continuing(["Hel", "lo"], cut), _call(), _batcher(log))
    assert "".join(c.text for c in log.chunks) == "Hello"


async def test_the_provider_never_gets_the_retry_choice() -> None:
    job = _job(1, on_retry="continue", stall_timeout_s=30)
    assert output_stream.provider_body(job) == ASKED


async def test_a_translated_responses_body_carries_the_prefix_to_its_wire() -> None:
    from jobgate.domain import on_retry
    from jobgate.providers.anthropic import AnthropicProvider
    from jobgate.providers.responses_front import ResponsesFront

    claude = AnthropicProvider("claude", ProviderConfig(kind="anthropic"))
    compatible = OpenAIProvider(
        "compatible",
        ProviderConfig(kind="openai", responses_api="chat_completions", assistant_prefill=True),
    )
    plain = OpenAIProvider("plain", ProviderConfig(kind="openai"))
    body = on_retry.with_prefix({"model": "m", "input": "hi", "max_output_tokens": 64}, "Hel")
    try:
        for front in (
            ResponsesFront(claude, "messages"),
            ResponsesFront(compatible, "chat_completions"),
        ):
            assert front.prefills("/v1/responses")
            _, sent = front.translate(body)
            assert sent["messages"][-1]["role"] == "assistant"
            assert "Hel" in str(sent["messages"][-1]["content"])
        assert not ResponsesFront(plain, "native").prefills("/v1/responses")
    finally:
        for provider in (claude, compatible, plain):
            await provider.aclose()
