"""How GET /v1/jobs reads its search: each criterion, the two time forms, and that any query
string is a search or an InvalidRequest naming a parameter, never another error."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobgate import errors
from jobgate.domain import job_search
from jobgate.domain.job import Job

DEC_1 = datetime(2026, 12, 1, 14, 0, tzinfo=UTC)


def test_each_criterion_reads_as_given() -> None:
    search = job_search.read(
        [
            ("model", "gpt-4.1-mini"),
            ("provider", "openai"),
            ("metadata[user]", "alice"),
            ("metadata[a.b]", ""),
            ("status", "queued"),
            ("status", "running"),
            ("limit", "5"),
            ("created_after", "1796133600"),
            ("created_before", "2026-12-01T15:00:00.5+01:00"),
        ]
    )
    assert (search.model, search.provider) == ("gpt-4.1-mini", "openai")
    assert search.metadata == {"user": "alice", "a.b": ""}
    assert search.created_after == DEC_1
    assert search.created_before == DEC_1.replace(microsecond=500_000)
    assert job_search.read([]) == job_search.JobSearch()


@pytest.mark.parametrize(
    "value",
    ["1796133600", "1796133600.0", "2026-12-01T14:00:00Z", "2026-12-01t14:00:00z",
     "2026-12-01 14:00:00+00:00", "2026-12-01T09:00:00-05:00", "2026-12-01T14:00:00.000000000Z"],
)  # fmt: skip
def test_a_time_is_unix_seconds_or_rfc_3339(value: str) -> None:
    assert job_search.read([("created_after", value)]).created_after == DEC_1


@pytest.mark.parametrize(
    "value",
    ["", "now", "2026-12-01", "2026-12-01T14:00Z", "2026-12-01T14:00:00", "20261201T140000Z",
     "-1", "+1", "1e9", " 1", "1_000", "0x10", "253402300800", "9999-12-31T23:59:59-01:00",
     "0001-01-01T00:00:00+00:01", "2026-02-30T00:00:00Z", "2026-12-01T24:00:00Z", "١٢٣"],
)  # fmt: skip
def test_anything_else_is_refused_naming_the_parameter(value: str) -> None:
    with pytest.raises(errors.InvalidRequest) as refused:
        job_search.read([("created_before", value)])
    assert refused.value.param == "created_before"


def test_created_after_may_equal_but_not_pass_created_before() -> None:
    same = [("created_after", "100"), ("created_before", "100")]
    assert job_search.read(same).created_after == job_search.read(same).created_before
    with pytest.raises(errors.InvalidRequest):
        job_search.read([("created_after", "101"), ("created_before", "100")])


names = st.one_of(
    st.sampled_from(sorted(job_search.SEARCH_PARAMS | job_search.PAGE_PARAMS)),
    st.text(max_size=70).map(lambda key: f"metadata[{key}]"),
    st.text(max_size=12),
)
values = st.one_of(
    st.text(max_size=600),
    st.integers().map(str),
    st.floats().map(str),
    st.datetimes(timezones=st.none() | st.timezones()).map(lambda t: t.isoformat()),
)


@settings(max_examples=500, deadline=None, derandomize=True)
@given(query=st.lists(st.tuples(names, values), max_size=20))
def test_any_query_is_a_search_or_a_named_refusal(query: list[tuple[str, str]]) -> None:
    try:
        search = job_search.read(query)
    except errors.InvalidRequest as refused:
        # every refusal names what it refuses (a parameter, or the nameless one)
        assert refused.param or "without a name" in str(refused)
        return
    pairs = search.metadata or {}
    assert len(pairs) <= 16 and all(0 < len(k) <= 64 for k in pairs)
    assert all(len(v) <= 512 for v in pairs.values())
    for moment in (search.created_after, search.created_before):
        assert moment is None or moment.tzinfo is not None
    if search.created_after and search.created_before:
        assert search.created_after <= search.created_before


def _jobs(*ids: str) -> list[Job]:
    return [cast(Job, SimpleNamespace(id=job_id)) for job_id in ids]  # page() reads ids only


def test_a_page_read_with_its_look_ahead_has_more_after_its_last_job() -> None:
    page = job_search.page(_jobs("c", "b", "a"), limit=2, walked_to="a")
    assert [j.id for j in page.jobs] == ["c", "b"] and page.has_more and page.last_id == "b"


def test_a_partial_page_continues_after_the_last_job_walked() -> None:
    page = job_search.page(_jobs("c"), limit=2, walked_to="x")
    assert [j.id for j in page.jobs] == ["c"] and page.has_more and page.last_id == "x"
    empty = job_search.page([], limit=2, walked_to="y")
    assert empty.jobs == [] and empty.has_more and empty.last_id == "y"


def test_a_walk_that_met_every_job_ends_the_pages() -> None:
    page = job_search.page(_jobs("c", "b"), limit=2)
    assert [j.id for j in page.jobs] == ["c", "b"]
    assert not page.has_more and page.last_id == "b"
    assert job_search.page([], limit=2) == job_search.Page([], False, None)
