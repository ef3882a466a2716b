"""Job tokens over real HTTP, on both backends: a tenant's key creates a token for one job; the
token reads, streams, follows the events of and (with `cancel`) cancels that job, as a Bearer
token or `?token=`; every refusal (expired, another job, another tenant's job, a missing scope,
any other route, a tampered token, a purged job, a rotation that revokes) answers exactly as
an unknown key does; the create body's bounds answer problem+json."""

from __future__ import annotations

import base64
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobgate.domain import job_tokens
from jobgate.testing import FakeClock
from tests.api_server import Api

pytestmark = pytest.mark.asyncio
CHAT = "/v1/chat/completions"
UNKNOWN_KEY = "jg_" + "x" * 43


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def submit(api: Api, key: str, prompt: str = "hello") -> str:
    body = {"model": "sim-echo", "messages": [{"role": "user", "content": prompt}]}
    response = await api.http.post(
        "/v1/jobs", json={"endpoint": CHAT, "body": body}, headers=auth(key)
    )
    assert response.status_code == 202, response.text
    job_id: str = response.json()["id"]
    return job_id


async def token_for(api: Api, key: str, job_id: str, **body: Any) -> str:
    response = await api.http.post(f"/v1/jobs/{job_id}/tokens", json=body, headers=auth(key))
    assert response.status_code == 201, response.text
    token: str = response.json()["token"]
    return token


def shape(response: httpx.Response) -> tuple[int, str | None, Any]:
    """What a refusal says, without the request's own id."""
    body = response.json()
    body.pop("instance", None)
    return response.status_code, response.headers.get("www-authenticate"), body


async def unknown_key_answer(api: Api, method: str, path: str) -> tuple[int, str | None, Any]:
    return shape(await api.http.request(method, path, headers=auth(UNKNOWN_KEY)))


async def assert_refused(
    api: Api, token: str, method: str, path: str, *, as_query: bool = False
) -> None:
    """The token is answered on `path` exactly as an unknown key (401)."""
    if as_query:
        response = await api.http.request(method, path, params={"token": token})
    else:
        response = await api.http.request(method, path, headers=auth(token))
    expected = await unknown_key_answer(api, method, path)
    assert expected[0] == 401
    assert shape(response) == expected, (method, path, as_query, response.text)


TOKEN_ROUTES = [
    ("GET", "", "read"),
    ("GET", "/events", "read"),
    ("GET", "/stream", "stream"),
    ("POST", "/cancel", "cancel"),
]


async def test_a_token_reads_streams_and_cancels_its_job(api: Api) -> None:
    key = await api.key("acme")
    done, live = await submit(api, key, "streamed words"), await submit(api, key)
    created = await api.http.post(
        f"/v1/jobs/{done}/tokens",
        json={"ttl_s": 600, "scopes": ["stream", "read"]},
        headers=auth(key),
    )
    assert created.status_code == 201, created.text
    assert created.headers["cache-control"] == "no-store"
    answer = created.json()
    assert answer["object"] == "job_token" and answer["token"].startswith("jgt_")
    assert (answer["job_id"], answer["scopes"]) == (done, ["read", "stream"])
    now = int(api.runtime.clock.now().timestamp())
    assert answer["expires_at"] == now + 600
    token = answer["token"]
    await api.runtime.worker().run_once(limit=1)

    for headers, params in ((auth(token), {}), ({}, {"token": token})):
        read = await api.http.get(f"/v1/jobs/{done}", headers=headers, params=params)
        assert read.status_code == 200 and read.json()["status"] == "succeeded", read.text
        waited = await api.http.get(
            f"/v1/jobs/{done}", headers=headers, params={**params, "wait": 1}
        )
        assert waited.status_code == 200 and waited.json()["id"] == done
        events = await api.http.get(f"/v1/jobs/{done}/events", headers=headers, params=params)
        assert [e["to"] for e in events.json()["data"]][-1] == "succeeded"
        sse = await api.http.get(
            f"/v1/jobs/{done}/events",
            headers={**headers, "Accept": "text/event-stream"},
            params=params,
        )
        assert sse.status_code == 200 and "event: job.event" in sse.text
        stream = await api.http.get(f"/v1/jobs/{done}/stream", headers=headers, params=params)
        assert stream.status_code == 200, stream.text
        assert "streamed words" in stream.text and "event: job.succeeded" in stream.text

    canceller = await token_for(api, key, live, scopes=["cancel"])
    cancelled = await api.http.post(f"/v1/jobs/{live}/cancel", params={"token": canceller})
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    log = await api.http.get(f"/v1/jobs/{live}/events", headers=auth(key))
    assert log.json()["data"][-1]["actor"] == "api:job_token"


async def test_the_default_token_reads_and_streams_for_an_hour(api: Api) -> None:
    key = await api.key("acme")
    job_id = await submit(api, key)
    created = await api.http.post(f"/v1/jobs/{job_id}/tokens", json={}, headers=auth(key))
    answer = created.json()
    assert answer["scopes"] == ["read", "stream"]
    assert answer["expires_at"] == int(api.runtime.clock.now().timestamp()) + 3600
    whole = await api.http.post(
        f"/v1/jobs/{job_id}/tokens", json={"ttl_s": 60.0}, headers=auth(key)
    )
    assert whole.json()["expires_at"] == int(api.runtime.clock.now().timestamp()) + 60
    await assert_refused(api, answer["token"], "POST", f"/v1/jobs/{job_id}/cancel")


async def test_an_expired_token_is_refused_everywhere(api: Api, clock: FakeClock) -> None:
    key = await api.key("acme")
    job_id = await submit(api, key)
    token = await token_for(api, key, job_id, ttl_s=60, scopes=list(job_tokens.SCOPES))
    clock.advance(59)
    assert (await api.http.get(f"/v1/jobs/{job_id}", headers=auth(token))).status_code == 200
    clock.advance(1)
    for method, suffix, _ in TOKEN_ROUTES:
        await assert_refused(api, token, method, f"/v1/jobs/{job_id}{suffix}")
        await assert_refused(api, token, method, f"/v1/jobs/{job_id}{suffix}", as_query=True)


async def test_a_token_reaches_no_other_job_of_its_tenant_or_another(api: Api) -> None:
    acme, beta = await api.key("acme"), await api.key("beta")
    mine, sibling, foreign = (
        await submit(api, acme),
        await submit(api, acme),
        await submit(api, beta),
    )
    token = await token_for(api, acme, mine, scopes=list(job_tokens.SCOPES))
    for other in (sibling, foreign, "job_missing"):
        for method, suffix, _ in TOKEN_ROUTES:
            await assert_refused(api, token, method, f"/v1/jobs/{other}{suffix}")
            await assert_refused(api, token, method, f"/v1/jobs/{other}{suffix}", as_query=True)
    for job_id in (sibling, foreign):  # nothing was cancelled
        job = await api.runtime.storage.job_get(job_id=job_id)
        assert job is not None and job.cancel_requested_at is None


async def test_a_route_needs_its_scope(api: Api) -> None:
    key = await api.key("acme")
    job_id = await submit(api, key)
    for method, suffix, scope in TOKEN_ROUTES:
        others = [other for other in job_tokens.SCOPES if other != scope]
        token = await token_for(api, key, job_id, scopes=others)
        await assert_refused(api, token, method, f"/v1/jobs/{job_id}{suffix}")
        await assert_refused(api, token, method, f"/v1/jobs/{job_id}{suffix}", as_query=True)
    job = await api.runtime.storage.job_get(job_id=job_id)
    assert job is not None and job.cancel_requested_at is None


async def test_a_token_is_an_unknown_key_on_every_other_route(api: Api) -> None:
    key = await api.key("acme")
    job_id = await submit(api, key)
    token = await token_for(api, key, job_id, scopes=list(job_tokens.SCOPES))
    routes = [
        ("POST", "/v1/jobs"),
        ("GET", "/v1/jobs"),
        ("DELETE", f"/v1/jobs/{job_id}"),
        ("POST", f"/v1/jobs/{job_id}/retry"),
        ("POST", f"/v1/jobs/{job_id}/tokens"),
        ("GET", f"/v1/jobs/{job_id}/deliveries"),
        ("GET", f"/v1/responses/{job_id}"),
        ("POST", f"/v1/responses/{job_id}/cancel"),
        ("POST", "/v1/jobs/bulk"),
        ("GET", "/v1/webhook_endpoints"),
        ("GET", "/v1/webhook_secret"),
        ("GET", "/v1/batches"),
        ("GET", "/v1/files"),
        ("GET", "/v1/schedules"),
    ]
    for method, path in routes:
        await assert_refused(api, token, method, path)
    job = await api.runtime.storage.job_get(job_id=job_id)
    assert job is not None and job.purged_at is None and job.cancel_requested_at is None


async def test_an_api_key_never_travels_in_the_query(api: Api) -> None:
    key = await api.key("acme")
    job_id = await submit(api, key)
    for method, suffix, _ in TOKEN_ROUTES:
        await assert_refused(api, key, method, f"/v1/jobs/{job_id}{suffix}", as_query=True)


def tampered(token: str) -> list[str]:
    """Tokens that differ from `token`: a character of the payload or the mac changed, the
    mac cut or lengthened, another payload under this mac, and a payload re-signed with a
    wrong secret that grants more."""
    payload, mac = token[len(job_tokens.PREFIX) :].split(".")

    def flip(text: str, index: int) -> str:
        swapped = "A" if text[index] != "A" else "B"
        return text[:index] + swapped + text[index + 1 :]

    fields = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)).decode().split(".")
    fields[3] = "7"  # every scope
    fields[2] = str(int(fields[2]) + 86_400)
    grown = base64.urlsafe_b64encode(".".join(fields).encode()).rstrip(b"=").decode()
    forged = job_tokens.sign(
        job_tokens.Grant(fields[4], fields[5], frozenset(job_tokens.SCOPES), 2**33, 1),
        b"\x00" * 32,
    )
    return [
        f"jgt_{flip(payload, 0)}.{mac}",
        f"jgt_{flip(payload, len(payload) - 1)}.{mac}",
        f"jgt_{payload}.{flip(mac, 0)}",
        f"jgt_{payload}.{flip(mac, len(mac) - 1)}",
        f"jgt_{payload}.{mac[:-1]}",
        f"jgt_{payload}.{mac}A",
        f"jgt_{payload}.",
        f"jgt_{payload}",
        f"jgt_{grown}.{mac}",
        forged,
        f"jgt_{payload}.{mac}".upper(),
        "jgt_",
        "jgt_" + "A" * 2000,
    ]


async def test_a_tampered_token_is_refused(api: Api) -> None:
    key = await api.key("acme")
    job_id = await submit(api, key)
    token = await token_for(api, key, job_id, scopes=["read"])
    assert (await api.http.get(f"/v1/jobs/{job_id}", headers=auth(token))).status_code == 200
    for changed in tampered(token):
        assert changed != token
        await assert_refused(api, changed, "GET", f"/v1/jobs/{job_id}")
        await assert_refused(api, changed, "GET", f"/v1/jobs/{job_id}", as_query=True)


async def test_purging_the_job_revokes_its_tokens(api: Api) -> None:
    key = await api.key("acme")
    job_id = await submit(api, key)
    token = await token_for(api, key, job_id, scopes=list(job_tokens.SCOPES))
    await api.runtime.worker().run_once(limit=1)
    assert (await api.http.get(f"/v1/jobs/{job_id}", headers=auth(token))).status_code == 200
    assert (await api.http.delete(f"/v1/jobs/{job_id}", headers=auth(key))).status_code == 200
    for method, suffix, _ in TOKEN_ROUTES:
        await assert_refused(api, token, method, f"/v1/jobs/{job_id}{suffix}")
        await assert_refused(api, token, method, f"/v1/jobs/{job_id}{suffix}", as_query=True)
    refused = await api.http.post(f"/v1/jobs/{job_id}/tokens", json={}, headers=auth(key))
    assert refused.status_code == 409 and refused.json()["code"] == "job_purged"
    # The tenant's own key still reads what is left.
    assert (await api.http.get(f"/v1/jobs/{job_id}", headers=auth(key))).status_code == 200


async def test_a_rotation_keeps_or_revokes_the_tokens_issued_before(api: Api) -> None:
    key = await api.key("acme")
    job_id = await submit(api, key)
    first = await token_for(api, key, job_id, scopes=["read"])
    assert await api.runtime.job_tokens.rotate(revoke=False) == 2
    second = await token_for(api, key, job_id, scopes=["read"])
    assert first != second
    for token in (first, second):
        assert (await api.http.get(f"/v1/jobs/{job_id}", headers=auth(token))).status_code == 200
    assert await api.runtime.job_tokens.rotate(revoke=True) == 3
    await assert_refused(api, first, "GET", f"/v1/jobs/{job_id}")
    await assert_refused(api, second, "GET", f"/v1/jobs/{job_id}")
    third = await token_for(api, key, job_id, scopes=["read"])
    assert (await api.http.get(f"/v1/jobs/{job_id}", headers=auth(third))).status_code == 200
    assert [s.generation for s in await api.runtime.storage.job_token_secrets()] == [3]


async def test_only_the_tenants_key_creates_a_token(api: Api) -> None:
    acme, beta = await api.key("acme"), await api.key("beta")
    job_id = await submit(api, acme)
    foreign = await api.http.post(f"/v1/jobs/{job_id}/tokens", json={}, headers=auth(beta))
    assert foreign.status_code == 404 and foreign.json()["code"] == "not_found"
    missing = await api.http.post("/v1/jobs/job_missing/tokens", json={}, headers=auth(acme))
    assert missing.status_code == 404
    bad_id = await api.http.post("/v1/jobs/job%20x/tokens", json={}, headers=auth(acme))
    assert bad_id.status_code == 400
    anonymous = await api.http.post(f"/v1/jobs/{job_id}/tokens", json={})
    assert anonymous.status_code == 401


MAX = job_tokens.MAX_TTL_S


OUT_OF_BOUNDS: list[Any] = [
    {"ttl_s": 0},
    {"ttl_s": -5},
    {"ttl_s": MAX + 1},
    {"ttl_s": 2**70},
    {"ttl_s": "3600"},
    {"ttl_s": 3600.5},
    {"ttl_s": True},
    {"ttl_s": None},
    {"scopes": []},
    {"scopes": ["write"]},
    {"scopes": ["read", "read"]},
    {"scopes": "read"},
    {"scopes": ["Read"]},
    {"scopes": [None]},
    {"scopes": None},
    {"colour": "red"},
    [],
]


async def test_a_create_body_out_of_bounds_is_refused(api: Api) -> None:
    key = await api.key("acme")
    job_id = await submit(api, key)
    for body in OUT_OF_BOUNDS:
        response = await api.http.post(f"/v1/jobs/{job_id}/tokens", json=body, headers=auth(key))
        assert response.status_code == 400, (body, response.text)
        assert response.headers["content-type"] == "application/problem+json"


async def test_the_longest_token_lives_a_day(api: Api, clock: FakeClock) -> None:
    key = await api.key("acme")
    job_id = await submit(api, key)
    token = await token_for(api, key, job_id, ttl_s=MAX, scopes=["read"])
    clock.advance(MAX - 1)
    assert (await api.http.get(f"/v1/jobs/{job_id}", headers=auth(token))).status_code == 200
    clock.advance(1)
    await assert_refused(api, token, "GET", f"/v1/jobs/{job_id}")


@pytest.fixture
async def acme_key(api: Api) -> str:
    """One tenant's key for every example (hypothesis reuses a test's fixtures)."""
    return await api.key("acme")


ttls = st.one_of(
    st.integers(min_value=-10, max_value=MAX + 10),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=5),
    st.booleans(),
    st.none(),
)
scope_names = st.sampled_from([*job_tokens.SCOPES, "write", "", "READ", "read "])
scope_lists = st.one_of(st.lists(scope_names, max_size=5), st.text(max_size=5), st.none())
bodies = st.fixed_dictionaries(
    {}, optional={"ttl_s": ttls, "scopes": scope_lists, "extra": st.integers()}
)


def expected_grant(body: dict[str, Any]) -> tuple[int, list[str]] | None:
    """(ttl_s, scopes shown) of a body the route accepts; None for one it refuses."""
    if "extra" in body:
        return None
    ttl = body.get("ttl_s", job_tokens.DEFAULT_TTL_S)
    scopes = body.get("scopes", list(job_tokens.DEFAULT_SCOPES))
    if type(ttl) not in (int, float) or ttl != int(ttl) or not 1 <= ttl <= MAX:
        return None
    if not isinstance(scopes, list) or not scopes or len(set(scopes)) != len(scopes):
        return None
    if any(scope not in job_tokens.SCOPES for scope in scopes):
        return None
    return int(ttl), job_tokens.ordered(scopes)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=True,
)
@given(body=bodies)
async def test_any_create_body_is_granted_exactly_or_refused(
    api: Api, acme_key: str, body: dict[str, Any]
) -> None:
    key = acme_key
    job_id = await submit(api, key)
    response = await api.http.post(f"/v1/jobs/{job_id}/tokens", json=body, headers=auth(key))
    expected = expected_grant(body)
    if expected is None:
        assert response.status_code == 400, (body, response.text)
        assert response.headers["content-type"] == "application/problem+json"
        return
    assert response.status_code == 201, (body, response.text)
    answer = response.json()
    ttl, scopes = expected
    assert answer["scopes"] == scopes
    assert answer["expires_at"] == int(api.runtime.clock.now().timestamp()) + ttl
    for method, suffix, scope in TOKEN_ROUTES[:1] + TOKEN_ROUTES[3:]:
        path = f"/v1/jobs/{job_id}{suffix}"
        if scope in scopes:
            ok = await api.http.request(method, path, headers=auth(answer["token"]))
            assert ok.status_code == 200, (body, path, ok.text)
        else:
            await assert_refused(api, answer["token"], method, path)


async def test_no_origin_is_allowed_by_default(api: Api) -> None:
    key = await api.key("acme")
    job_id = await submit(api, key)
    token = await token_for(api, key, job_id)
    origin = {"Origin": "https://app.example.com"}
    preflight = await api.http.options(
        f"/v1/jobs/{job_id}", headers={**origin, "Access-Control-Request-Method": "GET"}
    )
    assert "access-control-allow-origin" not in preflight.headers
    read = await api.http.get(f"/v1/jobs/{job_id}", params={"token": token}, headers=origin)
    assert read.status_code == 200 and "access-control-allow-origin" not in read.headers
