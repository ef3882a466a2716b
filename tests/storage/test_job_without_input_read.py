"""`job_without_input` (a Response's retrieve, long poll, stream and cancel): the job as
`job_get` reads it for its tenant, except that on PostgreSQL a request over 2 KB comes without
its `input` (the prompt, which a Response never shows): neither sent nor decoded per poll.
Everything a Response renders from the request (instructions, tools, settings) stays. Damaged
rows read as `job_get` reads them."""

from __future__ import annotations

import dataclasses
import random
import string
from typing import Any

import pytest

from jobgate.storage.protocol import Storage
from jobgate.testing import FakeClock
from tests.storage.helpers import make_tenant, new_job, submit_one
from tests.storage.poison_rows import json_text, poisons, poke

pytestmark = pytest.mark.asyncio

_TEXT = "".join(random.Random(9).choices(string.printable, k=20_000))  # > 2 KB compressed
SETTINGS: dict[str, Any] = {
    "model": "m",
    "instructions": "Answer briefly.",
    "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
    "max_output_tokens": 64,
    "metadata": {"k": "v"},
    "background": True,
    "temperature": 0.5,
}
REQUESTS: list[dict[str, Any]] = [
    {**SETTINGS, "input": _TEXT},  # the prompt as a string
    {**SETTINGS, "input": [{"role": "user", "content": [{"type": "input_text", "text": _TEXT}]}]},
    {**SETTINGS, "input": "short"},  # small: read whole
    {**SETTINGS, "instructions": _TEXT, "input": "short"},  # large settings: all kept
    {"input": None, "tools": [None, {"a": None}], "pad": _TEXT},
    {"model": "m", "messages": [{"role": "user", "content": _TEXT}]},  # no input at all
    {},
]


@pytest.mark.parametrize("request_body", REQUESTS)
async def test_a_response_read_is_the_job_but_its_input(
    storage: Storage, clock: FakeClock, request_body: dict[str, Any]
) -> None:
    tenant = await make_tenant(storage)
    job = (
        await submit_one(storage, job=new_job(tenant, request=request_body), now=clock.now())
    ).job
    full = await storage.job_get(job_id=job.id, tenant_id=tenant.id)
    read = await storage.job_without_input(job_id=job.id, tenant_id=tenant.id)
    assert full is not None and read is not None
    assert full.request == request_body
    assert dataclasses.replace(read, request=full.request) == full
    assert read.request is not None
    settings = {k: v for k, v in request_body.items() if k != "input"}
    assert {k: v for k, v in read.request.items() if k != "input"} == settings
    if storage.dialect == "postgres" and len(str(request_body)) > 20_000:
        assert read.request == settings  # the large prompt stayed behind
    if "input" in read.request:
        assert read.request["input"] == request_body["input"]


async def test_a_response_read_is_the_tenants_own(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    other = await make_tenant(storage, "other")
    job = (await submit_one(storage, job=new_job(tenant), now=clock.now())).job
    assert await storage.job_without_input(job_id=job.id, tenant_id=other.id) is None
    assert await storage.job_without_input(job_id="job_missing", tenant_id=tenant.id) is None


async def test_poison_rows_read_as_job_get_reads_them(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    letters = "".join(random.Random(10).choices(string.ascii_letters, k=20_000))
    kinds = {
        **poisons(storage),
        # Over 2 KB and no object: read whole (`-` on a JSON string would be an error).
        "long_request_not_an_object": {"request": json_text(storage, f'"{letters}"')},
        "long_request_an_array": {"request": json_text(storage, f'["input", "{letters}"]')},
        "purged": {"request": "NULL"},
    }
    for name, columns in kinds.items():
        job = (await submit_one(storage, job=new_job(tenant), now=clock.now())).job
        await poke(storage, "jobs", job.id, **columns)
        full = await storage.job_get(job_id=job.id, tenant_id=tenant.id)
        read = await storage.job_without_input(job_id=job.id, tenant_id=tenant.id)
        assert full is not None and read is not None, name
        assert read == full, name
