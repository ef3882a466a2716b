"""GET /v1/jobs searches: metadata[KEY]=VALUE, model, provider, created_after and
created_before, beside status, tenant-scoped and paged by `after`; every value out of its
range is a 400 problem, never a 5xx."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobgate.domain import job_search
from tests.api_server import Api

pytestmark = pytest.mark.asyncio

CHAT = "/v1/chat/completions"


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def submit(api: Api, key: str, model: str = "sim-echo", **extra: Any) -> str:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    response = await api.http.post(
        "/v1/jobs", json={"endpoint": CHAT, "body": body, **extra}, headers=auth(key)
    )
    assert response.status_code == 202, response.text
    job_id: str = response.json()["id"]
    return job_id


async def listed(api: Api, key: str, params: Any) -> list[str]:
    response = await api.http.get("/v1/jobs", params=params, headers=auth(key))
    assert response.status_code == 200, response.text
    return [job["id"] for job in response.json()["data"]]


async def test_each_filter_and_all_together(api: Api) -> None:
    key = await api.key("acme")
    alice = await submit(api, key, metadata={"user": "alice", "kind": "summary"})
    bob = await submit(api, key, model="sim-other", metadata={"user": "bob", "kind": "summary"})
    other = await submit(api, key, provider="scripted", metadata={"user": "alice"})
    assert await listed(api, key, {"metadata[user]": "alice"}) == [other, alice]
    both = [("metadata[user]", "alice"), ("metadata[kind]", "summary")]
    assert await listed(api, key, both) == [alice]
    assert await listed(api, key, {"model": "sim-other"}) == [bob]
    assert await listed(api, key, {"provider": "scripted"}) == [other]
    assert await listed(api, key, {"provider": "sim", "metadata[kind]": "summary"}) == [bob, alice]
    assert await listed(api, key, {"status": "cancelled", "model": "sim-echo"}) == []
    assert await listed(api, key, {"status": "queued", "model": "sim-echo"}) == [other, alice]


async def test_created_after_includes_and_before_excludes(api: Api) -> None:
    """A job's `created_at` (whole seconds) is at or before its creation: created_after it
    includes the job, created_before it leaves it out; a second later, the other way round.
    Each time as Unix seconds and as RFC 3339."""
    key = await api.key("acme")
    job_id = await submit(api, key)
    created = (await api.http.get(f"/v1/jobs/{job_id}", headers=auth(key))).json()["created_at"]
    for at in (created, created + 1):
        stamp = datetime.fromtimestamp(at, UTC)
        for form in (str(at), stamp.isoformat().replace("+00:00", "Z"), stamp.isoformat()):
            included = at == created
            assert (job_id in await listed(api, key, {"created_after": form})) is included
            assert (job_id in await listed(api, key, {"created_before": form})) is not included
    window = {"created_after": created, "created_before": created + 1}
    assert await listed(api, key, window) == [job_id]
    assert await listed(api, key, {"created_after": created, "created_before": created}) == []


async def test_a_search_sees_only_the_tenants_jobs(api: Api) -> None:
    acme, beta = await api.key("acme"), await api.key("beta")
    mine = await submit(api, acme, metadata={"user": "alice"})
    theirs = await submit(api, beta, metadata={"user": "alice"})
    assert await listed(api, acme, {"metadata[user]": "alice"}) == [mine]
    assert await listed(api, beta, {"metadata[user]": "alice", "model": "sim-echo"}) == [theirs]
    foreign = await api.http.get(
        "/v1/jobs", params={"model": "sim-echo", "after": theirs}, headers=auth(acme)
    )
    assert foreign.status_code == 404


async def test_filtered_pages_chain_by_last_id(api: Api) -> None:
    key = await api.key("acme")
    wanted = []
    for n in range(7):
        job_id = await submit(api, key, metadata={"batch": "b1" if n % 2 else "b2"})
        if n % 2:
            wanted.append(job_id)
    seen: list[str] = []
    params: dict[str, Any] = {"metadata[batch]": "b1", "limit": 2}
    while True:
        page = (await api.http.get("/v1/jobs", params=params, headers=auth(key))).json()
        seen += [job["id"] for job in page["data"]]
        if not page["has_more"]:
            break
        params["after"] = page["last_id"]
    assert seen == wanted[::-1]


async def test_a_partial_page_says_where_the_next_one_starts(api: Api) -> None:
    """A search page reads at most search_walk_rows of the tenant's jobs: a stretch without
    a match answers a partial page (fewer jobs than the limit, even none) with has_more and
    last_id, the last job read, which the page does not show; paging on by last_id meets
    every match once."""
    api.runtime.jobs.search_walk_rows = 3
    key = await api.key("acme")
    wanted = [await submit(api, key, model="sim-rare")]
    for _ in range(6):
        await submit(api, key)
    wanted.append(await submit(api, key, model="sim-rare"))
    pages: list[dict[str, Any]] = []
    params: dict[str, Any] = {"model": "sim-rare", "limit": 2}
    while not pages or pages[-1]["has_more"]:
        response = await api.http.get("/v1/jobs", params=params, headers=auth(key))
        assert response.status_code == 200, response.text
        pages.append(response.json())
        params["after"] = pages[-1]["last_id"]
    assert [job["id"] for page in pages for job in page["data"]] == wanted[::-1]
    shown = [[job["id"] for job in page["data"]] for page in pages]
    # newest first: the newer match and two others read, then three others (none shown),
    # then two others and the older match, which ends the walk
    assert [len(ids) for ids in shown] == [1, 0, 1]
    assert pages[0]["has_more"] and pages[0]["last_id"] not in shown[0]
    assert pages[1]["has_more"] and pages[1]["last_id"] is not None
    assert not pages[2]["has_more"] and pages[2]["last_id"] == wanted[0]


REFUSED = [
    ({"metadata": "user=alice"}, "metadata"),  # not metadata[KEY]
    ({"metadata.user": "alice"}, "metadata.user"),
    ({"metadata[user": "alice"}, "metadata[user"),
    ({"metadata[]": "alice"}, "metadata"),
    ({"metadata[" + "k" * 65 + "]": "v"}, "metadata"),
    ({"metadata[k]": "v" * 513}, "metadata[k]"),
    ([("metadata[k]", "a"), ("metadata[k]", "b")], "metadata[k]"),
    ({f"metadata[k{n}]": "v" for n in range(17)}, "metadata"),
    ({"modle": "sim-echo"}, "modle"),
    ({"model": ""}, "model"),
    ({"provider": "p" * 201}, "provider"),
    ([("model", "a"), ("model", "b")], "model"),
    ({"created_after": "yesterday"}, "created_after"),
    ({"created_after": "2026-12-01"}, "created_after"),  # a date, no time
    ({"created_after": "2026-12-01T14:00:00"}, "created_after"),  # no offset
    ({"created_after": "2026-13-01T14:00:00Z"}, "created_after"),
    ({"created_before": "-5"}, "created_before"),
    ({"created_before": "1e9"}, "created_before"),
    ({"created_before": "99999999999999"}, "created_before"),
    ({"created_before": "0001-01-01T00:00:00+01:00"}, "created_before"),
    ({"created_after": "200", "created_before": "100"}, "created_after"),
]


@pytest.mark.parametrize(("params", "param"), REFUSED)
async def test_a_bad_search_is_a_400_problem(api: Api, params: Any, param: str) -> None:
    key = await api.key("acme")
    response = await api.http.get("/v1/jobs", params=params, headers=auth(key))
    assert response.status_code == 400, (params, response.text)
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["error"]["param"] == param, response.json()


async def test_the_openapi_document_names_every_search_parameter(api: Api) -> None:
    doc = (await api.http.get("/openapi.json")).json()
    parameters = {p["name"]: p for p in doc["paths"]["/v1/jobs"]["get"]["parameters"]}
    assert parameters["metadata"]["style"] == "deepObject" and parameters["metadata"]["explode"]
    for name in ("model", "provider", "created_after", "created_before", "status", "after"):
        assert name in parameters, name
    for name in ("created_after", "created_before"):
        description = parameters[name]["description"]
        assert "Unix seconds" in description and "RFC 3339" in description


@pytest.fixture
async def acme_key(api: Api) -> str:
    """One tenant's key and two jobs for every example (hypothesis reuses a test's fixtures)."""
    key = await api.key("acme")
    await submit(api, key, metadata={"user": "alice"})
    await submit(api, key, model="sim-other")
    return key


names = st.one_of(
    st.sampled_from(
        ["model", "provider", "created_after", "created_before", "status", "limit", "after"]
    ),
    st.builds(lambda key: f"metadata[{key}]", st.text(max_size=70)),
    st.text(max_size=12),
)
times = st.one_of(
    st.integers(min_value=-(2**40), max_value=2**40).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.datetimes(timezones=st.timezones()).map(lambda t: t.isoformat()),
    st.datetimes().map(lambda t: t.isoformat()),
)
values = st.one_of(st.text(max_size=40), times, st.sampled_from(["sim-echo", "sim", "alice"]))


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=True,
)
@given(query=st.lists(st.tuples(names, values), max_size=5))
async def test_any_query_is_answered_or_refused_never_a_5xx(
    api: Api, acme_key: str, query: list[tuple[str, str]]
) -> None:
    try:
        params: list[tuple[str, str | int | float | bool | None]] = list(query)
        response = await api.http.get("/v1/jobs", params=params, headers=auth(acme_key))
    except httpx.InvalidURL:  # a character no URL can carry: nothing reached the server
        return
    assert response.status_code in (200, 400, 404), (query, response.text)
    if response.status_code != 200:
        assert response.headers["content-type"] == "application/problem+json"
        return
    try:
        search = job_search.read(query)
    except Exception:  # the route accepted what the domain refuses: wrong
        pytest.fail(f"accepted {query!r}")
    for job in response.json()["data"]:
        assert search.model in (None, job["model"]) and search.provider in (None, job["provider"])
        for member, value in (search.metadata or {}).items():
            assert job["metadata"].get(member) == value
