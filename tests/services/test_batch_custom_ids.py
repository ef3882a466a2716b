"""A line's `custom_id` comes back exactly as sent, on both backends: a NUL (which PostgreSQL's
text and jsonb refuse, and SQLite's JSON functions cut short) or any other character, in the
output and error files alike."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobgate.process.runtime import Runtime
from jobgate.services.batches import BatchService
from jobgate.services.files import FileService
from tests.roles.test_batch_runner import chunks_of

CHAT = "/v1/chat/completions"


async def run_batch(runtime: Runtime, tenant_id: str, lines: list[dict[str, Any]]) -> Any:
    data = [orjson.dumps(line) + b"\n" for line in lines]
    files = FileService(storage=runtime.storage, settings=runtime.settings, ids=runtime.ids)
    record = await files.upload(
        tenant_id=tenant_id, purpose=lambda: "batch", filename="in.jsonl", data=chunks_of(data)
    )
    service = BatchService(storage=runtime.storage, settings=runtime.settings, ids=runtime.ids)
    batch = await service.create(
        tenant_id=tenant_id,
        input_file_id=record.id,
        endpoint=CHAT,
        completion_window="24h",
        metadata=None,
    )
    runner = runtime.batch_runner()
    for _ in range(10):
        await runner.batches_once()
        await runtime.worker().run_once(limit=100)
        done = await runtime.storage.batch_get(batch_id=batch.id)
        assert done is not None
        if done.status in ("completed", "failed"):
            return done
    raise AssertionError("the batch did not end")


async def result_lines(runtime: Runtime, file_id: str | None) -> list[dict[str, Any]]:
    if file_id is None:
        return []
    chunks = await runtime.storage.file_chunks(file_id=file_id, from_seq=0, limit=100)
    return [orjson.loads(raw) for chunk in chunks for raw in chunk.data.splitlines()]


def line(custom_id: str, messages: Any = None) -> dict[str, Any]:
    body = {"model": "sim-echo", "messages": messages or [{"role": "user", "content": "hi"}]}
    return {"custom_id": custom_id, "method": "POST", "url": CHAT, "body": body}


async def test_a_nul_in_a_custom_id_comes_back_exactly(runtime: Runtime) -> None:
    tenant = (await runtime.tenants.create("acme")).tenant
    sent = ["a\x00b", "\x00", "plain", "é\u2028😀"]
    done = await run_batch(runtime, tenant.id, [line(c) for c in sent])
    assert done.status == "completed" and done.completed_count == len(sent)
    output = await result_lines(runtime, done.output_file_id)
    assert sorted(entry["custom_id"] for entry in output) == sorted(sent)
    jobs = await runtime.storage.job_list(tenant_id=tenant.id, limit=10)
    # The job's metadata (jsonb on PostgreSQL) shows a NUL as U+FFFD; the files keep it.
    assert sorted(job.metadata["custom_id"] for job in jobs) == sorted(
        c.replace("\x00", "\ufffd") for c in sent
    )


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(custom_ids=st.lists(st.text(min_size=1, max_size=20), min_size=1, max_size=4, unique=True))
async def test_every_custom_id_comes_back_exactly_in_either_file(
    runtime: Runtime, custom_ids: list[str]
) -> None:
    tenant = (await runtime.tenants.create(f"t{len(await runtime.storage.tenant_list())}")).tenant
    refused = custom_ids[-1]  # a line whose job is refused lands in the error file
    lines = [line(c) for c in custom_ids[:-1]] + [line(refused, messages="not a list")]
    done = await run_batch(runtime, tenant.id, lines)
    assert done.status == "completed"
    output = await result_lines(runtime, done.output_file_id)
    errors = await result_lines(runtime, done.error_file_id)
    assert sorted(entry["custom_id"] for entry in output) == sorted(custom_ids[:-1])
    assert [entry["custom_id"] for entry in errors] == [refused]
