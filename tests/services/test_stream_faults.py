"""Streaming jobs against a fake upstream sending the providers' real payloads, on both stores:
whatever text a model streams is stored exactly, and a storage error that retrying cannot mend
fails the attempt instead of holding the job forever."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from prometheus_client import REGISTRY

from jobgate import errors
from jobgate.config import ProviderConfig, Settings
from jobgate.domain import verdicts
from jobgate.domain.job import Job, Lease
from jobgate.domain.states import JobState
from jobgate.process.runtime import Runtime
from jobgate.providers.base import Provider
from jobgate.providers.registry import ProviderRegistry
from jobgate.services import output_feed, rate_limits
from jobgate.services.jobs import SubmitSpec
from jobgate.storage.protocol import Storage
from jobgate.storage.records import OutputChunk
from jobgate.storage.sqlite.store import sqlite_store
from jobgate.testing import FakeClock, SequentialIds, eventually
from jobgate.wire.content import output_text
from tests.providers import upstreams
from tests.providers.upstreams import Upstream

pytestmark = pytest.mark.asyncio
CHAT = "/v1/chat/completions"
RUN_S = 20.0  # a run that takes longer is one that never ends


def runtime_for(
    storage: Storage,
    settings: Settings,
    clock: FakeClock,
    provider: Provider,
    config: ProviderConfig | None = None,
) -> Runtime:
    registry = ProviderRegistry(
        {provider.name: provider},
        configs={provider.name: config or ProviderConfig(kind=provider.kind)},
        default=provider.name,
        clock=clock,
    )
    return Runtime(settings, storage=storage, clock=clock, ids=SequentialIds(), providers=registry)


async def submit(
    runtime: Runtime, body: dict[str, Any] | None = None, *, tenant: str = "acme", **spec: Any
) -> str:
    owner = (await runtime.tenants.create(tenant)).tenant
    request = body or {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "hi"}]}
    outcome = await runtime.jobs.submit(
        tenant_id=owner.id, spec=SubmitSpec(endpoint=CHAT, body=request, stream=True, **spec)
    )
    return outcome.job.id


async def run_once(runtime: Runtime, clock: FakeClock) -> Job:
    """Run the next claimable job to its verdict (a retry is claimable after its backoff: on
    the fake clock for SQLite, on the database's own for PostgreSQL)."""
    async with asyncio.timeout(RUN_S):
        while True:
            ran = await runtime.worker().run_once()
            if ran:
                [done] = ran
                assert done is not None
                return done
            clock.advance(0.1)
            await asyncio.sleep(0.01)


async def streamed(storage: Storage, job_id: str) -> str:
    return "".join(chunk.text for chunk in await storage.job_output_read(job_id=job_id))


# -- any text, stored exactly ------------------------------------------------------------------


async def test_a_nul_the_model_streams_is_stored_exactly(
    storage: Storage, settings: Settings, clock: FakeClock
) -> None:
    pieces = ["nul \x00 here", " and \uffff0 there", "\x00"]
    upstream = Upstream(upstreams.stream(upstreams.openai_sse(upstreams.chat_text(*pieces))))
    runtime = runtime_for(storage, settings, clock, upstream.openai(clock))
    job_id = await submit(runtime)
    done = await run_once(runtime, clock)
    assert done.state is JobState.SUCCEEDED, done.error
    text = "".join(pieces)
    assert output_text(done.result) == text
    assert await streamed(storage, job_id) == text
    job = await runtime.jobs.view(tenant_id=done.tenant_id, job_id=job_id)
    assert output_text(job.result) == text


# -- a storage error a retry cannot mend ---------------------------------------------------------


class RefusingOutput:
    """The storage, except that every output append is refused as no retry would mend (a
    constraint, a value the column cannot hold)."""

    def __init__(self, storage: Storage) -> None:
        self._storage = storage
        self.appends = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._storage, name)

    async def job_output_append(self, *, lease: Lease, text: str, **_: Any) -> OutputChunk:
        self.appends += 1
        raise errors.StorageError("postgres: CheckViolationError: refused")


async def test_an_append_the_database_refuses_fails_the_attempt(
    storage: Storage, settings: Settings, clock: FakeClock
) -> None:
    upstream = Upstream(upstreams.stream(upstreams.openai_sse(upstreams.chat_text("a", "b"))))
    refusing = RefusingOutput(storage)
    runtime = runtime_for(refusing, settings, clock, upstream.openai(clock))
    job_id = await submit(runtime)
    first = await run_once(runtime, clock)
    assert first.state is JobState.QUEUED and first.attempt == 1
    assert first.error is not None and first.error["code"] == "output_not_stored"
    assert refusing.appends == 1  # not retried: it would be refused again
    for _ in range(2):
        last = await run_once(runtime, clock)
    assert last.id == job_id and last.state is JobState.FAILED and last.dead_lettered
    assert last.attempt == settings.max_attempts == 3  # each one counted
    assert last.error is not None and last.error["code"] == "output_not_stored"
    assert last.result is None  # no answer whose output log is missing


# -- a void attempt's text never stands as the answer ---------------------------------------------


async def feed(runtime: Runtime, job: Job) -> list[tuple[str, dict[str, Any]]]:
    events = output_feed.job_output(
        runtime.jobs, runtime.feeds, tenant_id=job.tenant_id, job_id=job.id, after=0
    )
    return [(event.event, event.data) async for event in events]


async def test_an_empty_last_attempt_voids_the_text_streamed_before(
    storage: Storage, settings: Settings, clock: FakeClock
) -> None:
    """The first attempt streams text, then its stream breaks (retried: the provider
    deduplicates by idempotency key); the second answers with empty text. A reader must not
    be left with the first attempt's text as the answer."""
    broken = upstreams.Stall(
        upstreams.openai_sse(upstreams.chat_text("void ", "text")[:3], done=False)
    )
    empty = upstreams.openai_sse(upstreams.chat_text())
    upstream = Upstream(broken, upstreams.stream(empty))
    provider = upstream.openai(clock, idempotent_creates=True)
    runtime = runtime_for(storage, settings, clock, provider)
    job_id = await submit(runtime)
    running = asyncio.create_task(run_once(runtime, clock))

    async def written() -> bool:
        return await streamed(storage, job_id) == "void text"

    await eventually(written, what="the first attempt's text stored")
    broken.release.set()  # then its stream ends without [DONE]
    first = await running
    assert first.state is JobState.QUEUED and first.error is not None
    done = await run_once(runtime, clock)
    assert done.state is JobState.SUCCEEDED and output_text(done.result) == ""
    events = await feed(runtime, done)
    assert [name for name, _ in events] == [
        output_feed.DELTA,
        output_feed.RESET,
        "job.succeeded",
    ]
    assert events[0][1]["text"] == "void text"
    assert events[1][1] == {"seq": 2, "generation": done.run_count}
    # A reader that saw the void text resumes after it: the reset comes first again.
    resumed = output_feed.job_output(
        runtime.jobs, runtime.feeds, tenant_id=done.tenant_id, job_id=done.id, after=1
    )
    assert [event.event async for event in resumed] == [output_feed.RESET, "job.succeeded"]


# -- rate limits inside a stream ----------------------------------------------------------------

TPM_MESSAGE = (
    "Rate limit reached for gpt-4.1-mini in organization org-abc on tokens per min (TPM): "
    "Limit 30000, Used 29500, Requested 1200. Please try again in 6.57s. Visit "
    "https://platform.openai.com/account/rate-limits to learn more."
)


def rate_limited_stream(**error: Any) -> bytes:
    """A chat stream that starts, then reports a rate limit, as OpenAI does."""
    payload = {"type": "tokens", "code": "rate_limit_exceeded", "message": TPM_MESSAGE,
               "param": None, **error}  # fmt: skip
    start = upstreams.chat_chunk("Once upon", role="assistant")
    return upstreams.openai_sse([start, {"error": payload}])


async def test_a_rate_limit_mid_stream_waits_for_the_reset_it_names(
    storage: Storage, settings: Settings, clock: FakeClock
) -> None:
    headers = {"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "50.529s"}
    upstream = Upstream(upstreams.stream(rate_limited_stream(headers=headers)))
    runtime = runtime_for(storage, settings, clock, upstream.openai(clock))
    await submit(runtime)
    limited = await run_once(runtime, clock)
    assert limited.state is JobState.QUEUED and limited.attempt == 0  # not counted
    assert limited.error is not None and limited.error["code"] == "rate_limit_exceeded"
    waited_s = (limited.run_at - limited.updated_at).total_seconds()
    assert 50.529 <= waited_s <= 50.529 * 1.2 + 0.01  # at least the reset, jittered


@pytest.fixture
async def sqlite_storage(tmp_path: Path, clock: FakeClock) -> AsyncIterator[Storage]:
    """SQLite alone, whose clock is the fake one: minutes of waits pass at once."""
    store = sqlite_store(str(tmp_path / "jobgate.db"), clock=clock)
    await store.open()
    await store.migrate()
    yield store
    await store.close()


async def test_one_job_draws_a_bounded_number_of_calls_a_minute(
    sqlite_storage: Storage, settings: Settings, clock: FakeClock
) -> None:
    """An upstream answering every call with a rate limit that names no wait: the job comes
    back no sooner than a second later, its free retries run out, then its attempts, and it
    fails; it never spins. (The rule is the worker's, whatever the store: SQLite's clock is
    the fake one, so the minutes it waits pass at once.)"""
    storage = sqlite_storage
    bare = {"type": "requests", "code": "rate_limit_exceeded", "message": "Rate limited",
            "param": None}  # fmt: skip
    start = upstreams.chat_chunk("x", role="assistant")
    upstream = Upstream(upstreams.stream(upstreams.openai_sse([start, {"error": bare}])))
    provider = upstream.openai(clock, retry_after_default_s=0)
    runtime = runtime_for(storage, settings, clock, provider)
    job_id = await submit(runtime)
    started = clock.now()
    last = await run_once(runtime, clock)
    while last.state is JobState.QUEUED:
        last = await run_once(runtime, clock)
    assert last.id == job_id and last.state is JobState.FAILED and last.dead_lettered
    assert last.error is not None and last.error["code"] == "rate_limit_exceeded"
    calls = len(upstream.requests)
    assert calls == verdicts.MAX_UNCOUNTED_RETRIES + settings.max_attempts
    waited_s = (clock.now() - started).total_seconds()
    assert waited_s >= (calls - 1) * verdicts.RATE_LIMIT_MIN_WAIT_S  # never two in a second


async def test_a_rate_limit_mid_stream_holds_the_shared_token_bucket(
    storage: Storage, settings: Settings, clock: FakeClock
) -> None:
    """Every worker process shares the provider's `tpm`: the reset one job was told of keeps
    the others from calling before it too."""
    headers = {"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "50.529s"}
    upstream = Upstream(upstreams.stream(rate_limited_stream(headers=headers)))
    provider = upstream.openai(clock)
    config = ProviderConfig(kind="openai", tpm=600_000)
    runtime = runtime_for(storage, settings, clock, provider, config=config)
    await submit(runtime)
    await submit(runtime, tenant="globex")
    worker = runtime.worker()
    claimed: list[Job] = []
    async with asyncio.timeout(RUN_S):
        while len(claimed) < 2:  # one claim per request taken from the bucket
            claimed += await worker.claim()
            clock.advance(0.1)
            await asyncio.sleep(0.01)
    # Both told the same reset at once: the bucket is held until then, not twice as long.
    done = await worker.run_claimed(claimed)
    assert all(d is not None and d.state is JobState.QUEUED for d in done)
    (bucket,) = rate_limits.buckets_of(provider.name, config, "gpt-4.1-mini")
    waits = await storage.rate_limit_waits(buckets=[bucket])
    assert 50.0 <= waits[(bucket.provider, bucket.model)] <= 61.0


# -- transient faults and quota inside a stream -------------------------------------------------

ANTHROPIC_START: dict[str, Any] = {
    "type": "message_start",
    "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 9, "output_tokens": 1},
    },
}  # fmt: skip
MESSAGES_BODY = {
    "model": "claude-x",
    "max_tokens": 16,
    "messages": [{"role": "user", "content": "hi"}],
}


def anthropic_answer(text: str) -> bytes:
    return upstreams.typed_sse(
        [
            ANTHROPIC_START,
            {"type": "content_block_start", "index": 0,
             "content_block": {"type": "text", "text": ""}},
            {"type": "content_block_delta", "index": 0,
             "delta": {"type": "text_delta", "text": text}},
            {"type": "content_block_stop", "index": 0},
            {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
             "usage": {"output_tokens": 2}},
            {"type": "message_stop"},
        ]
    )  # fmt: skip


def anthropic_error(error: dict[str, Any]) -> bytes:
    return upstreams.typed_sse([ANTHROPIC_START, {"type": "error", "error": error}])


async def submit_messages(runtime: Runtime) -> str:
    owner = (await runtime.tenants.create("acme")).tenant
    spec = SubmitSpec(endpoint="/v1/messages", body=MESSAGES_BODY, stream=True)
    return (await runtime.jobs.submit(tenant_id=owner.id, spec=spec)).job.id


async def test_an_overloaded_stream_is_retried_as_a_529_would_be(
    storage: Storage, settings: Settings, clock: FakeClock
) -> None:
    overloaded = anthropic_error({"type": "overloaded_error", "message": "Overloaded"})
    upstream = Upstream(upstreams.stream(overloaded), upstreams.stream(anthropic_answer("ok")))
    runtime = runtime_for(storage, settings, clock, upstream.anthropic(clock))
    await submit_messages(runtime)
    first = await run_once(runtime, clock)
    assert first.state is JobState.QUEUED and first.attempt == 1  # counted, like a 529
    assert first.error is not None and first.error["code"] == "overloaded_error"
    done = await run_once(runtime, clock)
    assert done.state is JobState.SUCCEEDED and output_text(done.result) == "ok"


async def test_a_spend_limit_mid_stream_fails_the_job_as_quota_and_alerts(
    storage: Storage, settings: Settings, clock: FakeClock
) -> None:
    error = {"type": "rate_limit_error", "message": "Rate limited",
             "details": {"error_code": "enforced_spend_limit_reached"}}  # fmt: skip
    upstream = Upstream(upstreams.stream(anthropic_error(error)))
    runtime = runtime_for(storage, settings, clock, upstream.anthropic(clock))
    labels = {"provider": "upstream", "code": "enforced_spend_limit_reached"}
    before = REGISTRY.get_sample_value("jobgate_provider_quota_errors_total", labels) or 0.0
    await submit_messages(runtime)
    done = await run_once(runtime, clock)
    assert done.state is JobState.FAILED and len(upstream.requests) == 1
    assert done.error is not None and done.error["type"] == "insufficient_quota"
    assert done.error["code"] == "enforced_spend_limit_reached"
    after = REGISTRY.get_sample_value("jobgate_provider_quota_errors_total", labels)
    assert after == before + 1


# -- streams that stall ------------------------------------------------------------------------


async def test_a_stalled_stream_ends_the_attempt_as_a_retryable_timeout(
    storage: Storage, settings: Settings, clock: FakeClock
) -> None:
    head = upstreams.openai_sse([upstreams.chat_chunk("half ", role="assistant")], done=False)
    whole = upstreams.openai_sse(upstreams.chat_text("whole"))
    upstream = Upstream(upstreams.Stall(head), upstreams.stream(whole))
    runtime = runtime_for(storage, settings, clock, upstream.openai(clock))
    await submit(runtime, stall_timeout_s=1.0)
    first = await run_once(runtime, clock)
    assert first.state is JobState.QUEUED and first.attempt == 1  # counted, retried
    assert first.error is not None and first.error["code"] == "stream_stalled"
    assert all("stall_timeout_s" not in body for body in upstream.bodies)  # jobgate's own
    done = await run_once(runtime, clock)
    assert done.state is JobState.SUCCEEDED and output_text(done.result) == "whole"


async def test_the_stall_timeout_defaults_to_the_setting(
    storage: Storage, settings: Settings, clock: FakeClock
) -> None:
    """JOBGATE_STALL_TIMEOUT_S; an Anthropic job streams even when it did not ask to."""
    upstream = Upstream(upstreams.Stall(upstreams.typed_sse([ANTHROPIC_START])))
    quick = settings.model_copy(update={"stall_timeout_s": 1.0})
    runtime = runtime_for(storage, quick, clock, upstream.anthropic(clock))
    owner = (await runtime.tenants.create("acme")).tenant
    await runtime.jobs.submit(
        tenant_id=owner.id, spec=SubmitSpec(endpoint="/v1/messages", body=MESSAGES_BODY)
    )
    first = await run_once(runtime, clock)
    assert first.error is not None and first.error["code"] == "stream_stalled"


# -- n and logprobs ----------------------------------------------------------------------------


async def test_a_job_stores_the_same_result_with_and_without_stream(
    storage: Storage, settings: Settings, clock: FakeClock
) -> None:
    from tests.providers.test_chat_stream_assembly import BODY, COMPLETION, _chunks

    plain_answer = upstreams.status(200, COMPLETION)
    stream_answer = upstreams.stream(upstreams.openai_sse(_chunks()))

    def answer(request: httpx.Request) -> httpx.Response:
        asked = orjson.loads(request.content).get("stream") is True
        return (stream_answer if asked else plain_answer)(request)

    upstream = Upstream(answer)
    runtime = runtime_for(storage, settings, clock, upstream.openai(clock))
    owner = (await runtime.tenants.create("acme")).tenant
    ids = []
    for stream in (False, True):
        spec = SubmitSpec(endpoint=CHAT, body=dict(BODY), stream=stream)
        ids.append((await runtime.jobs.submit(tenant_id=owner.id, spec=spec)).job.id)
    await asyncio.wait_for(runtime.worker().run_once(), RUN_S)
    plain, streamed = [await storage.job_get(job_id=job_id) for job_id in ids]
    assert plain is not None and streamed is not None
    assert plain.state is streamed.state is JobState.SUCCEEDED
    assert plain.result == streamed.result == COMPLETION
    assert plain.usage == streamed.usage
