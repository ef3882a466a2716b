"""Job search: job_search's filters by model, provider, creation time and metadata, each alone
and together, tenant-scoped and keyset-paginated by a bounded walk (a page may be partial and
says where the next one starts), on SQLite and PostgreSQL alike."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest

from jobgate import errors
from jobgate.domain import job_search
from jobgate.domain.job_search import JobSearch
from jobgate.domain.states import JobState
from jobgate.storage.protocol import Storage
from jobgate.storage.records import Tenant
from jobgate.testing import FakeClock
from tests.storage.helpers import make_tenant, new_job, submit_one

pytestmark = pytest.mark.asyncio


async def made(storage: Storage, tenant: Tenant, clock: FakeClock, **fields: Any) -> str:
    """A job created now, then a second passes (each job its own creation time)."""
    job = (await submit_one(storage, job=new_job(tenant, **fields), now=clock.now())).job
    clock.advance(1)
    return job.id


def split(filters: dict[str, Any]) -> tuple[JobSearch, dict[str, Any]]:
    """The search criteria of `filters`, and the rest (states, dead_lettered, paging)."""
    names = {f.name for f in dataclasses.fields(JobSearch)}
    search = JobSearch(**{k: v for k, v in filters.items() if k in names})
    return search, {k: v for k, v in filters.items() if k not in names}


async def ids(storage: Storage, tenant: Tenant, **filters: Any) -> list[str]:
    search, rest = split(filters)
    found = await storage.job_search(tenant_id=tenant.id, search=search, limit=100, **rest)
    assert found.walked_to is None  # a handful of jobs: the walk meets them all
    return [j.id for j in found.jobs]


async def walked_pages(
    storage: Storage, tenant: Tenant, *, limit: int, walk_limit: int, **filters: Any
) -> list[job_search.Page]:
    """Every page of a search, chained by `after` while `has_more` (as the clients page)."""
    search, rest = split(filters)
    pages: list[job_search.Page] = []
    after: str | None = None
    while not pages or pages[-1].has_more:
        assert len(pages) < 100, "the pages never end"
        found = await storage.job_search(
            tenant_id=tenant.id,
            search=search,
            after=after,
            limit=limit + 1,
            walk_limit=walk_limit,
            **rest,
        )
        pages.append(job_search.page(found.jobs, limit, found.walked_to))
        after = pages[-1].last_id
    return pages


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
        await storage.job_search(tenant_id=acme.id, search=JobSearch(model="m"), after=theirs)


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
        inserted = (await submit_one(storage, job=job, now=clock.now())).job
        if n % 2 == 0 or "created_before" in filters:
            matching.append(inserted.id)
        if n % 3 == 2:
            clock.advance(1)  # some jobs share a creation time: the id breaks the tie
    if "created_before" in filters:
        filters = {"created_before": clock.now() + timedelta(seconds=1)}
    expected = matching[::-1]  # ids grow with each insert
    for walk_limit in (1, 2, 3, 1000):  # a walk shorter, as long as and longer than a page
        pages = await walked_pages(storage, acme, limit=2, walk_limit=walk_limit, **filters)
        assert [j.id for page in pages for j in page.jobs] == expected, walk_limit
        assert all(len(page.jobs) <= 2 for page in pages)
        if walk_limit == 1000:
            assert all(len(page.jobs) == 2 for page in pages[:-1])


async def test_a_walk_that_reaches_its_bound_gives_a_partial_page(
    storage: Storage, clock: FakeClock
) -> None:
    """A search reads at most walk_limit of the tenant's jobs: when none of them matches, its
    page holds no job and names the last job walked, after which the next page reads on."""
    acme = await make_tenant(storage)
    match = await made(storage, acme, clock, model="m")
    others = [await made(storage, acme, clock, model="x") for _ in range(5)]
    newest_first = others[::-1]
    found = await storage.job_search(
        tenant_id=acme.id, search=JobSearch(model="m"), limit=3, walk_limit=4
    )
    assert found.jobs == [] and found.walked_to == newest_first[3]
    found = await storage.job_search(
        tenant_id=acme.id, search=JobSearch(model="m"), after=found.walked_to, limit=3, walk_limit=4
    )
    assert [j.id for j in found.jobs] == [match] and found.walked_to is None


async def test_the_walk_counts_only_jobs_inside_the_created_range(
    storage: Storage, clock: FakeClock
) -> None:
    """The created range bounds the walk itself: jobs outside it are not read, so they do not
    use up the walk (a range far back in a busy tenant's history is found in one page)."""
    acme = await make_tenant(storage)
    old = [await made(storage, acme, clock, model="m") for _ in range(2)]
    end = clock.now()
    for _ in range(6):
        await made(storage, acme, clock, model="x")
    pages = await walked_pages(storage, acme, limit=5, walk_limit=2, model="m", created_before=end)
    assert [[j.id for j in page.jobs] for page in pages] == [old[::-1], []]
    assert pages[0].has_more  # the walk reached its bound exactly at the range's end


async def test_the_cursor_may_be_a_job_that_does_not_match(
    storage: Storage, clock: FakeClock
) -> None:
    acme = await make_tenant(storage)
    first = await made(storage, acme, clock, model="m")
    other = await made(storage, acme, clock, model="x")
    await made(storage, acme, clock, model="m")
    found = await storage.job_search(tenant_id=acme.id, search=JobSearch(model="m"), after=other)
    assert [j.id for j in found.jobs] == [first]
