"""Job search: job_list's filters by model, provider, creation time and metadata, each alone
and together, tenant-scoped and keyset-paginated, on SQLite and PostgreSQL alike."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from jobgate import errors
from jobgate.domain.states import JobState
from jobgate.storage.protocol import Storage
from jobgate.storage.records import Tenant
from jobgate.testing import FakeClock
from tests.storage.helpers import make_tenant, new_job

pytestmark = pytest.mark.asyncio


async def made(storage: Storage, tenant: Tenant, clock: FakeClock, **fields: Any) -> str:
    """A job created now, then a second passes (each job its own creation time)."""
    job = (await storage.job_insert(job=new_job(tenant, **fields), now=clock.now())).job
    clock.advance(1)
    return job.id


async def ids(storage: Storage, tenant: Tenant, **filters: Any) -> list[str]:
    return [j.id for j in await storage.job_list(tenant_id=tenant.id, limit=100, **filters)]


async def test_model_and_provider_filter_exactly(storage: Storage, clock: FakeClock) -> None:
    acme = await make_tenant(storage)
    a = await made(storage, acme, clock, model="gpt-4.1-mini", provider="openai")
    b = await made(storage, acme, clock, model="gpt-4.1", provider="openai")
    c = await made(storage, acme, clock, model="claude", provider="anthropic")
    assert await ids(storage, acme, model="gpt-4.1") == [b]
    assert await ids(storage, acme, model="GPT-4.1") == []  # exact, case and all
    assert await ids(storage, acme, provider="openai") == [b, a]
    assert await ids(storage, acme, provider="anthropic", model="claude") == [c]
    assert await ids(storage, acme, provider="anthropic", model="gpt-4.1") == []


async def test_metadata_pairs_must_all_hold_as_strings(storage: Storage, clock: FakeClock) -> None:
    acme = await make_tenant(storage)
    both = await made(storage, acme, clock, metadata={"user": "42", "kind": "summary"})
    user = await made(storage, acme, clock, metadata={"user": "42"})
    number = await made(storage, acme, clock, metadata={"user": 42})  # a number, not "42"
    nested = await made(storage, acme, clock, metadata={"deep": {"user": "42"}})
    await made(storage, acme, clock)
    assert await ids(storage, acme, metadata={"user": "42"}) == [user, both]
    assert await ids(storage, acme, metadata={"user": "42", "kind": "summary"}) == [both]
    assert await ids(storage, acme, metadata={"user": "4"}) == []  # exact, not a prefix
    assert await ids(storage, acme, metadata={"kind": ""}) == []
    assert number not in await ids(storage, acme, metadata={"user": "42"})
    assert nested not in await ids(storage, acme, metadata={"user": "42"})
    odd = {"a.b": "x", 'q"uote': "é 💡", "$[0]": "%_"}  # keys that are paths or patterns elsewhere
    special = await made(storage, acme, clock, metadata=odd)
    assert await ids(storage, acme, metadata=odd) == [special]
    assert await ids(storage, acme, metadata={"a.b": "x"}) == [special]
    assert await ids(storage, acme, metadata={"$[0]": "%"}) == []


async def test_created_after_is_inclusive_and_before_exclusive(
    storage: Storage, clock: FakeClock
) -> None:
    acme = await make_tenant(storage)
    start = clock.now()
    first = await made(storage, acme, clock)
    second = await made(storage, acme, clock)
    third = await made(storage, acme, clock)
    after_first = start + timedelta(seconds=1)
    assert await ids(storage, acme, created_after=after_first) == [third, second]
    assert await ids(storage, acme, created_before=after_first) == [first]
    window = {"created_after": after_first, "created_before": after_first + timedelta(seconds=1)}
    assert await ids(storage, acme, **window) == [second]
    assert await ids(storage, acme, created_after=after_first, created_before=after_first) == []
    assert await ids(storage, acme, created_after=start + timedelta(days=1)) == []


async def test_search_is_scoped_to_the_tenant(storage: Storage, clock: FakeClock) -> None:
    acme = await make_tenant(storage, "acme")
    beta = await make_tenant(storage, "beta")
    mine = await made(storage, acme, clock, model="m", metadata={"user": "1"})
    theirs = await made(storage, beta, clock, model="m", metadata={"user": "1"})
    for filters in ({"model": "m"}, {"provider": "sim"}, {"metadata": {"user": "1"}}):
        assert await ids(storage, acme, **filters) == [mine]
        assert await ids(storage, beta, **filters) == [theirs]
    with pytest.raises(errors.InvalidRequest):  # the other tenant's job is no cursor
        await storage.job_list(tenant_id=acme.id, model="m", after=theirs)


async def test_search_combines_with_status_and_dead_letters(
    storage: Storage, clock: FakeClock
) -> None:
    acme = await make_tenant(storage)
    live = await made(storage, acme, clock, model="m", metadata={"k": "v"})
    gone = await made(storage, acme, clock, model="m", metadata={"k": "v"})
    await storage.job_cancel(job_id=gone, tenant_id=acme.id, actor="test", now=clock.now())
    for filters in ({"model": "m"}, {"metadata": {"k": "v"}}, {"created_after": clock.now()}):
        cancelled = [JobState.CANCELLED]
        expected = [] if "created_after" in filters else [gone]
        assert await ids(storage, acme, states=cancelled, **filters) == expected
        assert await ids(storage, acme, dead_lettered=True, **filters) == []
    assert await ids(storage, acme, states=[JobState.QUEUED], model="m") == [live]
    assert await ids(storage, acme, dead_lettered=False, metadata={"k": "v"}) == [gone, live]


@pytest.mark.parametrize(
    "filters",
    [
        {"model": "m"},
        {"provider": "p"},
        {"metadata": {"k": "v"}},
        {"model": "m", "provider": "p", "metadata": {"k": "v"}},
        {"created_before": "END"},
    ],
)
async def test_filtered_pages_follow_the_cursor(
    storage: Storage, clock: FakeClock, filters: dict[str, Any]
) -> None:
    """Pages of a filtered list chain by `after` (the last id of the page before), each job
    once, newest first, skipping the jobs between matches; jobs created at one instant are
    ordered by id."""
    acme = await make_tenant(storage)
    matching: list[str] = []
    for n in range(7):
        match = {"model": "m", "provider": "p", "metadata": {"k": "v"}}
        other = {"model": "x", "provider": "q", "metadata": {"k": "w"}}
        job = new_job(acme, **(match if n % 2 == 0 else other))
        inserted = (await storage.job_insert(job=job, now=clock.now())).job
        if n % 2 == 0 or "created_before" in filters:
            matching.append(inserted.id)
        if n % 3 == 2:
            clock.advance(1)  # some jobs share a creation time: the id breaks the tie
    if "created_before" in filters:
        filters = {"created_before": clock.now() + timedelta(seconds=1)}
    expected = matching[::-1]  # ids grow with each insert
    pages: list[list[str]] = []
    after: str | None = None
    while True:
        page = await storage.job_list(tenant_id=acme.id, after=after, limit=2, **filters)
        if not page:
            break
        pages.append([j.id for j in page])
        after = page[-1].id
    assert [i for page in pages for i in page] == expected
    assert all(len(page) == 2 for page in pages[:-1])
