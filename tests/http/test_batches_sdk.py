"""OpenAI's Batch API through the official `openai` SDK in strict mode, on both backends:
files.create -> batches.create -> batches.retrieve until done -> files.content;
failing lines in the error file, cancel mid-way, expiry."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, Final

import openai
import orjson
import pytest

from jobgate.roles.batch_runner import BatchRunner
from jobgate.testing import FakeClock
from tests.api_server import Api

CHAT: Final = "/v1/chat/completions"


def line(custom_id: str, text: str | None = None, **sim: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "sim-echo", "messages": [{"role": "user", "content": text or custom_id}]
    }  # fmt: skip
    if sim:
        body["sim"] = sim
    return {"custom_id": custom_id, "method": "POST", "url": CHAT, "body": body}


def jsonl(lines: list[dict[str, Any]]) -> bytes:
    return b"".join(orjson.dumps(value) + b"\n" for value in lines)


def parse(content: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(raw) for raw in content.splitlines() if raw.strip()]


@contextlib.asynccontextmanager
async def sdk(api: Api) -> AsyncIterator[openai.AsyncOpenAI]:
    key = await api.key("acme")
    client = openai.AsyncOpenAI(
        api_key=key, base_url=f"{api.url}/v1", max_retries=0, _strict_response_validation=True
    )
    async with client:
        yield client


@contextlib.asynccontextmanager
async def roles(api: Api, *, worker: bool = True) -> AsyncIterator[BatchRunner]:
    runner = api.runtime.batch_runner(interval_s=0.02)
    tasks = [asyncio.create_task(runner.run())]
    running = api.runtime.worker() if worker else None
    if running is not None:
        tasks.append(asyncio.create_task(running.run()))
    try:
        yield runner
    finally:
        runner.request_stop()
        if running is not None:
            running.request_stop()
        await asyncio.wait_for(asyncio.gather(*tasks), 15)


async def until(client: openai.AsyncOpenAI, batch_id: str, *statuses: str) -> Any:
    for _ in range(1500):
        batch = await client.batches.retrieve(batch_id)
        if batch.status in statuses:
            return batch
        await asyncio.sleep(0.02)
    raise AssertionError(f"batch stayed {batch.status}")


async def test_a_batch_runs_to_completed_with_failing_lines_in_the_error_file(api: Api) -> None:
    lines = [line(f"ok-{i}") for i in range(5)]
    lines.insert(2, line("bad-1", fail_with="invalid_request"))
    lines.append(line("bad-2", fail_with="invalid_request"))
    async with sdk(api) as client, roles(api):
        uploaded = await client.files.create(file=("in.jsonl", jsonl(lines)), purpose="batch")
        batch = await client.batches.create(
            input_file_id=uploaded.id,
            endpoint=CHAT,
            completion_window="24h",
            metadata={"run": "one"},
        )
        assert batch.status == "validating"
        assert batch.request_counts is not None and batch.request_counts.total == 0
        done = await until(client, batch.id, "completed", "failed", "expired")
        assert done.status == "completed" and done.completed_at is not None
        assert done.request_counts is not None
        assert (done.request_counts.completed, done.request_counts.failed) == (5, 2)
        assert done.output_file_id and done.error_file_id and done.metadata == {"run": "one"}
        output = parse((await client.files.content(done.output_file_id)).content)
        errors_ = parse((await client.files.content(done.error_file_id)).content)
        listed = await client.batches.list()
        assert [b.id for b in listed.data] == [batch.id]
    assert [o["custom_id"] for o in output] == [f"ok-{i}" for i in range(5)]
    first = output[0]
    assert first["response"]["status_code"] == 200 and first["error"] is None
    assert first["response"]["body"]["choices"][0]["message"]["content"] == "echo: ok-0"
    assert first["response"]["request_id"].startswith("req_") and first["id"].startswith(
        "batch_req_"
    )
    assert sorted(e["custom_id"] for e in errors_) == ["bad-1", "bad-2"]
    assert all(e["response"]["status_code"] == 400 for e in errors_)
    assert errors_[0]["response"]["body"]["error"]["code"]
    # Each line ran once: one job per line, no more.
    tenant = (await api.runtime.tenants.authenticate(client.api_key)).id
    jobs = await api.runtime.storage.job_list(tenant_id=tenant, limit=100)
    assert len(jobs) == 7 and all(job.priority == 8 for job in jobs)
    assert sorted(job.metadata["custom_id"] for job in jobs) == sorted(
        entry["custom_id"] for entry in lines
    )


async def test_cancel_midway_keeps_what_finished(api: Api) -> None:
    lines = [line(f"ok-{i}") for i in range(3)] + [
        line(f"hang-{i}", fail_with="hang") for i in range(3)
    ]
    async with sdk(api) as client, roles(api):
        uploaded = await client.files.create(file=("in.jsonl", jsonl(lines)), purpose="batch")
        batch = await client.batches.create(
            input_file_id=uploaded.id, endpoint=CHAT, completion_window="24h"
        )
        for _ in range(1500):
            current = await client.batches.retrieve(batch.id)
            assert current.request_counts is not None
            if current.request_counts.completed == 3:
                break
            await asyncio.sleep(0.02)
        cancelling = await client.batches.cancel(batch.id)
        assert cancelling.status in ("cancelling", "cancelled")
        again = await client.batches.cancel(batch.id)  # idempotent
        assert again.status in ("cancelling", "finalizing", "cancelled")
        done = await until(client, batch.id, "cancelled")
        assert done.cancelled_at is not None and done.cancelling_at is not None
        output = parse((await client.files.content(done.output_file_id or "")).content)
        errors_ = parse((await client.files.content(done.error_file_id or "")).content)
        assert (await client.batches.cancel(batch.id)).status == "cancelled"
        with pytest.raises(openai.ConflictError):
            await _cancel_finished(client)
    assert sorted(o["custom_id"] for o in output) == ["ok-0", "ok-1", "ok-2"]
    assert sorted(e["custom_id"] for e in errors_) == ["hang-0", "hang-1", "hang-2"]
    assert {e["error"]["code"] for e in errors_} == {"batch_cancelled"}
    assert done.request_counts is not None  # lines cancelled before they ran: neither
    assert (done.request_counts.completed, done.request_counts.failed) == (3, 0)


async def _cancel_finished(client: openai.AsyncOpenAI) -> None:
    uploaded = await client.files.create(file=("in.jsonl", jsonl([line("x")])), purpose="batch")
    batch = await client.batches.create(
        input_file_id=uploaded.id, endpoint=CHAT, completion_window="24h"
    )
    await until(client, batch.id, "completed")
    await client.batches.cancel(batch.id)


async def test_expiry_moves_unfinished_lines_to_expired(api: Api, clock: FakeClock) -> None:
    lines = [line("ok-0"), line("hang-0", fail_with="hang"), line("hang-1", fail_with="hang")]
    async with sdk(api) as client:
        uploaded = await client.files.create(file=("in.jsonl", jsonl(lines)), purpose="batch")
        batch = await client.batches.create(
            input_file_id=uploaded.id, endpoint=CHAT, completion_window="24h"
        )
        runner = api.runtime.batch_runner()
        assert await runner.batches_once(now=clock.now()) == 1  # validated
        assert await runner.batches_once(now=clock.now()) == 1  # expanded
        # The first line runs; the others stay queued (never started) past the window.
        (ran,) = await api.runtime.worker().run_once(limit=1)
        assert ran is not None and ran.metadata["custom_id"] == "ok-0"
        clock.advance(24 * 3600 + 60)  # the fake clock stands still; the database moved on
        for _ in range(5):
            await runner.batches_once(now=clock.now())
        current = await client.batches.retrieve(batch.id)
        assert current.status == "expired" and current.expired_at is not None
        output = parse((await client.files.content(current.output_file_id or "")).content)
        errors_ = parse((await client.files.content(current.error_file_id or "")).content)
    assert [o["custom_id"] for o in output] == ["ok-0"]
    assert sorted(e["custom_id"] for e in errors_) == ["hang-0", "hang-1"]
    assert {e["error"]["code"] for e in errors_} == {"batch_expired"}
    assert all(e["response"] is None for e in errors_)


async def test_create_refusals_are_openai_errors(api: Api) -> None:
    async with sdk(api) as client:
        with pytest.raises(openai.NotFoundError):
            await client.batches.create(
                input_file_id="file_nope", endpoint=CHAT, completion_window="24h"
            )
        uploaded = await client.files.create(file=("in.jsonl", jsonl([line("a")])), purpose="batch")
        with pytest.raises(openai.BadRequestError):
            await client.batches.create(
                input_file_id=uploaded.id,
                endpoint="/v1/moderations",  # OpenAI has it; jobgate does not
                completion_window="24h",
            )
        with pytest.raises(openai.BadRequestError):
            await client.batches.create(
                input_file_id=uploaded.id,
                endpoint=CHAT,
                completion_window="1h",  # type: ignore[arg-type]
            )
        with pytest.raises(openai.NotFoundError):
            await client.batches.retrieve("batch_nope")


async def test_responses_lines_answer_response_objects_and_a_bad_one_is_refused(
    api: Api,
) -> None:
    def responses_line(custom_id: str, **body: Any) -> dict[str, Any]:
        return {"custom_id": custom_id, "method": "POST", "url": "/v1/responses",
                "body": {"model": "sim-echo", "input": custom_id, **body}}  # fmt: skip

    lines = [
        responses_line("r-0"),
        responses_line("r-bad", previous_response_id="resp_x"),  # refused when expanded
        responses_line("r-1"),
    ]
    async with sdk(api) as client, roles(api):
        uploaded = await client.files.create(file=("in.jsonl", jsonl(lines)), purpose="batch")
        batch = await client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/responses", completion_window="24h"
        )
        done = await until(client, batch.id, "completed")
        output = parse((await client.files.content(done.output_file_id or "")).content)
        errors_ = parse((await client.files.content(done.error_file_id or "")).content)
        foreign = await client.files.create(
            file=("in.jsonl", jsonl([responses_line("r-2"), line("chat-in-responses")])),
            purpose="batch",
        )
        mixed = await client.batches.create(
            input_file_id=foreign.id, endpoint="/v1/responses", completion_window="24h"
        )
        failed = await until(client, mixed.id, "failed")
    assert done.request_counts is not None
    assert (done.request_counts.completed, done.request_counts.failed) == (2, 1)
    assert [o["custom_id"] for o in output] == ["r-0", "r-1"]
    response = output[0]["response"]["body"]
    assert response["object"] == "response" and response["status"] == "completed"
    assert response["output"][0]["content"][0]["text"] == "echo: r-0"
    (refused,) = errors_
    assert refused["custom_id"] == "r-bad" and refused["response"]["status_code"] == 400
    assert refused["response"]["body"]["error"]["param"] == "previous_response_id"
    # A line whose url is not the batch's endpoint fails the batch as OpenAI's validation does.
    assert failed.errors is not None and failed.errors.data is not None
    assert [(e.code, e.line) for e in failed.errors.data] == [("url_mismatch", 2)]


async def test_the_input_file_of_a_running_batch_cannot_be_deleted(api: Api) -> None:
    """Deleting the input file while its batch runs answers 409 (the batch would sit with its
    lines unaccounted for until it expired); once the batch ended the file may go."""
    async with sdk(api) as client:
        uploaded = await client.files.create(
            file=("in.jsonl", jsonl([line(f"q{i}") for i in range(2)])), purpose="batch"
        )
        batch = await client.batches.create(
            input_file_id=uploaded.id, endpoint=CHAT, completion_window="24h"
        )
        with pytest.raises(openai.ConflictError) as refused:
            await client.files.delete(uploaded.id)
        assert refused.value.status_code == 409
        assert batch.id in refused.value.message
        assert (await client.files.retrieve(uploaded.id)).id == uploaded.id
        async with roles(api):
            done = await until(client, batch.id, "completed")
        assert done.request_counts is not None and done.request_counts.completed == 2
        deleted = await client.files.delete(uploaded.id)
        assert deleted.deleted


async def test_the_list_is_newest_first_paged_by_after_with_the_callers_metadata(
    api: Api,
) -> None:
    """What a client that finds its batch by metadata relies on (a jobgate whose upstream is
    this jobgate, with native batches, does)."""
    async with sdk(api) as client:
        uploaded = await client.files.create(file=("in.jsonl", jsonl([line("a")])), purpose="batch")
        made = [
            await client.batches.create(
                input_file_id=uploaded.id,
                endpoint=CHAT,
                completion_window="24h",
                metadata={"jobgate_part": f"part-{n}"},
            )
            for n in range(5)
        ]
        seen: list[list[str]] = []
        after: str | None = None
        while True:
            page = await (
                client.batches.list(limit=2)
                if after is None
                else client.batches.list(limit=2, after=after)
            )
            seen.append([(b.metadata or {}).get("jobgate_part", "") for b in page.data])
            if not page.has_more:
                break
            after = page.data[-1].id
    assert seen == [["part-4", "part-3"], ["part-2", "part-1"], ["part-0"]]
    assert [b.metadata for b in made] == [{"jobgate_part": f"part-{n}"} for n in range(5)]
