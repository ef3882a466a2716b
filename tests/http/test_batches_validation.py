"""A batch is validated as OpenAI validates one, through the official `openai` SDK in strict
mode, on both backends: files.create takes any well-formed `.jsonl` upload; the batch checks
its lines while `validating` (request counts 0/0/0 meanwhile) and, when some are bad, ends
`failed` with `errors.data[{code, line, message, param}]` and no job; a batch that ran carries
its `model` and summed `usage`; lines cancelled before they ran count as neither completed nor
failed; an `/v1/embeddings` batch runs on a provider that serves that endpoint."""

from __future__ import annotations

import asyncio
from typing import Any, Final

import httpx
import openai
import orjson
import pytest

from jobgate.config import ProviderConfig, Settings
from jobgate.process.runtime import Runtime
from jobgate.providers.openai import OpenAIProvider
from jobgate.providers.registry import ProviderRegistry
from jobgate.providers.simulated import SimProvider
from jobgate.storage.protocol import Storage
from jobgate.testing import FakeClock, SequentialIds
from tests.api_server import Api
from tests.http.test_batches_sdk import CHAT, jsonl, line, parse, roles, sdk, until

EMBEDDINGS: Final = "/v1/embeddings"


def embedded(request: httpx.Request) -> httpx.Response:
    """An OpenAI-compatible server's answer to POST /v1/embeddings."""
    assert request.url.path == "/v1/embeddings"
    sent = orjson.loads(request.content)
    return httpx.Response(
        200,
        json={
            "object": "list",
            "data": [{"object": "embedding", "index": 0, "embedding": [0.25, -0.5]}],
            "model": sent["model"],
            "usage": {"prompt_tokens": 7, "total_tokens": 7},
        },
    )


@pytest.fixture
def runtime(storage: Storage, settings: Settings, clock: FakeClock) -> Runtime:
    """The simulator, and an OpenAI-compatible `upstream` serving text-embedding-* models."""
    upstream = OpenAIProvider(
        "upstream",
        ProviderConfig(kind="openai", base_url="http://upstream.test/v1"),
        clock=clock,
        transport=httpx.MockTransport(embedded),
    )
    registry = ProviderRegistry(
        {"sim": SimProvider("sim", clock=clock), "upstream": upstream},
        configs={
            "sim": ProviderConfig(kind="sim", model_prefixes=("sim-",)),
            "upstream": ProviderConfig(
                kind="openai",
                base_url="http://upstream.test/v1",
                model_prefixes=("text-embedding-",),
            ),
        },
        default="sim",
    )
    return Runtime(settings, storage=storage, clock=clock, ids=SequentialIds(), providers=registry)


async def test_a_file_with_bad_lines_is_taken_and_its_batch_fails_with_every_error(
    api: Api,
) -> None:
    other_model = line("other-model")
    other_model["body"]["model"] = "sim-other"
    get = line("get")
    get["method"] = "GET"
    content = b"".join(
        [
            orjson.dumps(line("ok")) + b"\n",
            b'{"custom_id": "not json",\n',
            orjson.dumps(line("ok")) + b"\n",  # the same custom_id again
            b"\n",  # a blank line is skipped, and counted in the line numbers
            orjson.dumps({**line("elsewhere"), "url": "/v1/responses"}) + b"\n",
            orjson.dumps(other_model) + b"\n",
            orjson.dumps({k: v for k, v in line("x").items() if k != "custom_id"}) + b"\n",
            orjson.dumps(get),  # the last line has no newline
        ]
    )
    async with sdk(api) as client:
        uploaded = await client.files.create(file=("in.jsonl", content), purpose="batch")
        assert uploaded.bytes == len(content)
        assert uploaded.expires_at == uploaded.created_at + 30 * 86400
        assert (await client.files.content(uploaded.id)).content == content  # byte for byte
        batch = await client.batches.create(
            input_file_id=uploaded.id, endpoint=CHAT, completion_window="24h"
        )
        assert batch.status == "validating"
        assert batch.request_counts is not None
        assert (batch.request_counts.total, batch.request_counts.completed) == (0, 0)
        async with roles(api):
            done = await until(client, batch.id, "failed", "in_progress", "completed")
    assert done.status == "failed" and done.failed_at is not None
    assert done.errors is not None and done.errors.data is not None
    found = [(e.code, e.line, e.param) for e in done.errors.data]
    assert found == [
        ("invalid_json_line", 2, None),
        ("duplicate_custom_id", 3, "custom_id"),
        ("url_mismatch", 5, "url"),
        ("model_mismatch", 6, "body.model"),
        ("missing_required_parameter", 7, "custom_id"),
        ("invalid_value", 8, "method"),
    ]
    assert all(e.message for e in done.errors.data)
    assert done.request_counts is not None and done.request_counts.total == 0
    assert done.output_file_id is None and done.error_file_id is None
    tenant = (await api.runtime.tenants.authenticate(client.api_key)).id
    assert await api.runtime.storage.job_list(tenant_id=tenant, limit=10) == []


async def test_only_jsonl_files_are_taken(api: Api) -> None:
    async with sdk(api) as client:
        with pytest.raises(openai.BadRequestError) as refused:
            await client.files.create(file=("in.csv", jsonl([line("a")])), purpose="batch")
        assert refused.value.code == "invalid_file_format"
        empty = await client.files.create(file=("empty.jsonl", b""), purpose="batch")
        batch = await client.batches.create(
            input_file_id=empty.id, endpoint=CHAT, completion_window="24h"
        )
        async with roles(api):
            done = await until(client, batch.id, "failed")
    assert done.errors is not None and done.errors.data is not None
    assert [e.code for e in done.errors.data] == ["empty_file"]


async def test_a_batch_that_ran_carries_its_model_and_its_usage(api: Api) -> None:
    async with sdk(api) as client, roles(api):
        uploaded = await client.files.create(
            file=("in.jsonl", jsonl([line(f"q{i}", text=f"question {i}") for i in range(3)])),
            purpose="batch",
        )
        batch = await client.batches.create(
            input_file_id=uploaded.id, endpoint=CHAT, completion_window="24h"
        )
        done = await until(client, batch.id, "completed")
        again = await client.batches.retrieve(batch.id)  # frozen: the same when read again
    assert done.model == "sim-echo"
    assert done.usage is not None and done.usage.input_tokens > 0 and done.usage.output_tokens > 0
    assert done.usage.total_tokens == done.usage.input_tokens + done.usage.output_tokens
    assert again.usage == done.usage
    assert done.request_counts is not None
    assert (done.request_counts.total, done.request_counts.completed) == (3, 3)


async def test_lines_cancelled_before_they_ran_count_as_neither(api: Api) -> None:
    lines = [line(f"ok-{i}") for i in range(2)] + [
        line(f"hang-{i}", fail_with="hang") for i in range(2)
    ]
    async with sdk(api) as client, roles(api):
        uploaded = await client.files.create(file=("in.jsonl", jsonl(lines)), purpose="batch")
        batch = await client.batches.create(
            input_file_id=uploaded.id, endpoint=CHAT, completion_window="24h"
        )
        for _ in range(1500):
            current = await client.batches.retrieve(batch.id)
            assert current.request_counts is not None
            if current.request_counts.completed == 2:
                break
            await asyncio.sleep(0.02)
        await client.batches.cancel(batch.id)
        done = await until(client, batch.id, "cancelled")
    assert done.request_counts is not None
    assert (done.request_counts.total, done.request_counts.completed) == (4, 2)
    assert done.request_counts.failed == 0


async def test_an_embeddings_batch_runs_where_a_provider_serves_it(api: Api) -> None:
    def embed(custom_id: str, model: str = "text-embedding-3-small") -> dict[str, Any]:
        return {"custom_id": custom_id, "method": "POST", "url": EMBEDDINGS,
                "body": {"model": model, "input": f"text {custom_id}"}}  # fmt: skip

    async with sdk(api) as client, roles(api):
        uploaded = await client.files.create(
            file=("in.jsonl", jsonl([embed("e0"), embed("e1")])), purpose="batch"
        )
        batch = await client.batches.create(
            input_file_id=uploaded.id, endpoint=EMBEDDINGS, completion_window="24h"
        )
        done = await until(client, batch.id, "completed")
        output = parse((await client.files.content(done.output_file_id or "")).content)
        unserved = await client.files.create(
            file=("in.jsonl", jsonl([embed("s0", model="sim-echo")])), purpose="batch"
        )
        on_sim = await client.batches.create(
            input_file_id=unserved.id, endpoint=EMBEDDINGS, completion_window="24h"
        )
        refused = await until(client, on_sim.id, "completed")
        errors_ = parse((await client.files.content(refused.error_file_id or "")).content)
    assert done.model == "text-embedding-3-small"
    assert sorted(o["custom_id"] for o in output) == ["e0", "e1"]
    assert output[0]["response"]["body"]["data"][0]["embedding"] == [0.25, -0.5]
    assert done.usage is not None and done.usage.input_tokens == 14
    # The simulator does not serve embeddings: the line says so, the batch still ends.
    (entry,) = errors_
    assert entry["custom_id"] == "s0" and entry["response"]["status_code"] == 400
    assert entry["response"]["body"]["error"]["code"] == "unsupported_endpoint"
