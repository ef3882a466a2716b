"""`job_view` (the status read and a long poll's re-reads): the job as `job_get` reads it for
its tenant, except that its request may hold only the members a view reads
(VIEW_REQUEST_MEMBERS): on PostgreSQL the prompt is neither detoasted into text, sent nor
decoded per status read. Damaged rows read as `job_get` reads them."""

from __future__ import annotations

import dataclasses
import random
import string
from typing import Any

import pytest

from jobgate.storage.protocol import VIEW_REQUEST_MEMBERS, Storage
from jobgate.testing import FakeClock
from tests.storage.helpers import make_tenant, new_job, submit_one
from tests.storage.poison_rows import json_text, poisons, poke

pytestmark = pytest.mark.asyncio

# 20,000 random characters: over 2 KB stored even compressed (PostgreSQL then leaves it behind).
PROMPT = {"role": "user", "content": "".join(random.Random(7).choices(string.printable, k=20_000))}
REQUESTS: list[dict[str, Any]] = [
    {"model": "m", "messages": [PROMPT]},
    {"model": "m", "messages": [PROMPT], "stream": True, "max_tokens": 300},
    {"model": "m", "stream": False, "max_completion_tokens": 7, "max_output_tokens": None},
    {"messages": [PROMPT], "max_tokens": None, "max_output_tokens": {"a": None, "b": [None]}},
    {"input": "x", "max_output_tokens": {"nested": [None, True]}, "stream": "yes"},
    {},
]


def _members(request: dict[str, Any]) -> dict[str, Any]:
    """The members a view reads, object members that are null left out (a view may)."""
    return {
        k: _no_nulls(v) for k, v in request.items() if k in VIEW_REQUEST_MEMBERS and v is not None
    }


def _no_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _no_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_no_nulls(v) for v in value]
    return value


@pytest.mark.parametrize("request_body", REQUESTS)
async def test_a_view_is_the_job_but_the_prompt(
    storage: Storage, clock: FakeClock, request_body: dict[str, Any]
) -> None:
    tenant = await make_tenant(storage)
    job = (
        await submit_one(storage, job=new_job(tenant, request=request_body), now=clock.now())
    ).job
    full = await storage.job_get(job_id=job.id, tenant_id=tenant.id)
    view = await storage.job_view(job_id=job.id, tenant_id=tenant.id)
    assert full is not None and view is not None
    assert dataclasses.replace(view, request=full.request) == full
    assert view.request is not None
    # Every member a view reads is there, as stored (nulls aside); PostgreSQL leaves the rest
    # of a request over 2 KB behind (a smaller one costs less read whole).
    assert _members(view.request) == _members(request_body)
    if storage.dialect == "postgres" and "messages" in request_body:
        assert view.request == _members(request_body)


async def test_every_member_a_view_reads_is_kept(storage: Storage, clock: FakeClock) -> None:
    """VIEW_REQUEST_MEMBERS and the statement's list of members must not drift apart."""
    tenant = await make_tenant(storage)
    members = {name: index + 1 for index, name in enumerate(VIEW_REQUEST_MEMBERS)}
    body = members | {"model": "m", "messages": [PROMPT]}
    job = (await submit_one(storage, job=new_job(tenant, request=body), now=clock.now())).job
    view = await storage.job_view(job_id=job.id, tenant_id=tenant.id)
    assert view is not None and view.request is not None
    assert _members(view.request) == members and len(members) >= 4
    if storage.dialect == "postgres":
        assert view.request == members


async def test_a_page_of_jobs_reads_them_as_views(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    for body in REQUESTS:
        await submit_one(storage, job=new_job(tenant, request=body), now=clock.now())
    listed = await storage.job_list(tenant_id=tenant.id, limit=50)
    assert len(listed) == len(REQUESTS)
    for job in listed:
        view = await storage.job_view(job_id=job.id, tenant_id=tenant.id)
        assert view == job


async def test_a_view_is_the_tenants_own(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    other = await make_tenant(storage, "other")
    job = (await submit_one(storage, job=new_job(tenant), now=clock.now())).job
    assert await storage.job_view(job_id=job.id, tenant_id=other.id) is None
    assert await storage.job_view(job_id="job_missing", tenant_id=tenant.id) is None


async def test_a_purged_job_views_without_a_request(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    job = (await submit_one(storage, job=new_job(tenant), now=clock.now())).job
    await poke(storage, "jobs", job.id, request="NULL")
    view = await storage.job_view(job_id=job.id, tenant_id=tenant.id)
    assert view is not None and view.request is None and not view.damaged


async def test_poison_rows_view_as_they_read(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    # A request over 2 KB that is no object: read whole, and damaged, as job_get reads it.
    letters = "".join(random.Random(8).choices(string.ascii_letters, k=20_000))
    long_text = json_text(storage, f'"{letters}"')
    kinds = {**poisons(storage), "long_request_not_an_object": {"request": long_text}}
    for name, columns in kinds.items():
        job = (await submit_one(storage, job=new_job(tenant), now=clock.now())).job
        await poke(storage, "jobs", job.id, **columns)
        full = await storage.job_get(job_id=job.id, tenant_id=tenant.id)
        view = await storage.job_view(job_id=job.id, tenant_id=tenant.id)
        assert full is not None and view is not None, name
        assert view.damaged == full.damaged == tuple(kinds[name]), name
        assert view.request == full.request, name
        assert dataclasses.replace(view, request=full.request) == full, name
