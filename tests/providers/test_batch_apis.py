"""The registry of provider batch APIs and the OpenAI adapter: which providers get one, what a
part's line looks like, which endpoints go in a batch, the part size, and an ended batch read
back (through httpx.MockTransport); and how a read-back line is kept by the batch."""

from __future__ import annotations

import httpx
import orjson
import pytest

from jobgate import config, errors
from jobgate.config import ProviderConfig
from jobgate.providers import batch_apis
from jobgate.providers.base import Usage
from jobgate.providers.batch_apis import LineBack, OpenAIBatchApi
from jobgate.providers.openai_batches import OpenAIBatches
from jobgate.roles import provider_batch_poll

CHAT = "/v1/chat/completions"


def test_the_kinds_the_config_accepts_are_the_registrys() -> None:
    assert set(batch_apis.KINDS) == set(config.NATIVE_BATCH_KINDS)


async def test_only_native_providers_of_a_kind_with_an_api_get_one() -> None:
    assert batch_apis.api_for("oa", ProviderConfig(kind="openai")) is None
    assert batch_apis.api_for("s", ProviderConfig(kind="sim")) is None
    api = batch_apis.api_for("oa", ProviderConfig(kind="openai", native_batches=True))
    assert isinstance(api, OpenAIBatchApi) and api.name == "oa"
    assert api.limits.max_requests == 50_000 and api.limits.max_bytes == 200 * 1024 * 1024
    await api.aclose()
    small = ProviderConfig(kind="openai", native_batches=True, batch_max_requests=3)
    smaller = batch_apis.api_for("oa", small)
    assert smaller is not None and smaller.limits.max_requests == 3
    await smaller.aclose()


def _api(transport: httpx.MockTransport | None = None, **fields: object) -> OpenAIBatchApi:
    settings = ProviderConfig(
        kind="openai", base_url="http://upstream.test/v1", native_batches=True, **fields
    )
    return OpenAIBatchApi("oa", settings, OpenAIBatches("oa", settings, transport=transport))


async def test_a_line_goes_as_the_caller_wrote_it() -> None:
    api = _api()
    body = {"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}], "sim": {"a": 1}}
    line = {"custom_id": "line-7", "method": "POST", "url": CHAT, "body": body}
    # A real provider's line goes without `sim` (tests/providers/test_batch_line_directives.py).
    without = {**line, "body": {k: v for k, v in body.items() if k != "sim"}}
    assert api.size(line) == len(orjson.dumps(without))
    assert api.serves(CHAT) and api.serves("/v1/embeddings") and api.serves("/v1/responses")
    assert not api.serves("/v1/messages")
    await api.aclose()
    translated = _api(responses_api="chat_completions")
    assert translated.serves(CHAT) and not translated.serves("/v1/responses")
    await translated.aclose()


async def test_an_ended_batch_is_read_back_from_its_files() -> None:
    output = orjson.dumps(
        {"id": "r1", "custom_id": "line-1", "response": {"status_code": 200, "body": {}}}
    )
    failed = {"status_code": 500, "body": {"error": {"message": "boom"}}}
    errors_file = orjson.dumps({"id": "r2", "custom_id": "line-2", "response": failed})

    def answer(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path.endswith("/batches/batch_1"):
            return httpx.Response(
                200,
                json={
                    "id": "batch_1", "object": "batch", "status": "expired",
                    "request_counts": {"total": 3, "completed": 1, "failed": 1},
                    "output_file_id": "file-out", "error_file_id": "file-err",
                },
            )  # fmt: skip
        if path.endswith("/files/file-out/content"):
            return httpx.Response(200, content=output + b"\n")
        if path.endswith("/files/file-err/content"):
            return httpx.Response(200, content=errors_file + b"\n")
        return httpx.Response(404, json={"error": {"message": "no"}})

    api = _api(httpx.MockTransport(answer))
    state = await api.state("batch_1")
    assert state.ended and (state.counts.total, state.counts.completed) == (3, 1)
    sent = [{"custom_id": f"line-{n}", "url": CHAT, "body": {}} for n in (1, 2, 3)]
    lines = await api.results("b.oa.0", state, sent)
    assert [(r.line["custom_id"], r.succeeded) for r in lines] == [
        ("line-1", True), ("line-2", False), ("line-3", False)
    ]  # fmt: skip
    assert lines[0].usage is not None and lines[1].usage is None
    assert lines[2].line["error"]["code"] == "batch_expired"
    await api.aclose()


async def test_a_status_no_one_published_is_a_bad_answer() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"id": "batch_1", "object": "batch", "status": "odd"})

    api = _api(httpx.MockTransport(answer))
    with pytest.raises(errors.ProviderRetryable):
        await api.state("batch_1")
    await api.aclose()


def test_a_read_back_line_keeps_its_outcome_and_usage() -> None:
    usage = Usage(7, 3, cache_read_input_tokens=2)
    response = {"status_code": 200, "body": {}}
    ok = {"id": "r", "custom_id": "line-1", "response": response}
    kept = provider_batch_poll._native_result(1, LineBack(ok, True, usage), expired=False)
    assert (kept.outcome, kept.input_tokens, kept.output_tokens, kept.cached_tokens) == (
        "succeeded", 7, 3, 2
    )  # fmt: skip
    assert "custom_id" not in kept.result_line and kept.result_line["id"] == "r"
    bad = {"custom_id": "line-2", "response": {"status_code": 400, "body": {}}, "error": None}
    failed = provider_batch_poll._native_result(2, LineBack(bad, False, None), expired=False)
    assert failed.outcome == "failed"
    for code, outcome in [
        ("batch_expired", "not_run"),
        ("batch_cancelled", "not_run"),
        ("batch_failed", "failed"),
        ("batch_line_missing", "failed"),
    ]:
        line = {"custom_id": "line-3", "response": None, "error": {"code": code}}
        kept = provider_batch_poll._native_result(3, LineBack(line, False, None), expired=False)
        assert (kept.outcome, kept.input_tokens) == (outcome, 0)
    # A batch that expired: a line its provider batch never ran reads as expired.
    line = {"custom_id": "line-4", "response": None, "error": {"code": "batch_cancelled"}}
    kept = provider_batch_poll._native_result(4, LineBack(line, False, None), expired=True)
    assert kept.outcome == "not_run" and kept.result_line["error"]["code"] == "batch_expired"
