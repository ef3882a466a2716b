"""The operator dashboard over real HTTP: sign-in sessions, pages, redrive, origin checks,
framing and sniffing headers."""

from __future__ import annotations

from jobgate.domain.states import JobState
from jobgate.http.console import dashboard
from tests.api_server import Api


async def signed_in(api: Api) -> str:
    """Sign in as a new operator; the client's jar keeps the session cookie. Returns the key."""
    key = await api.runtime.operators.create("ada")
    response = await api.http.post("/dashboard/login", data={"key": key})
    assert response.status_code == 303 and response.headers["location"] == "/dashboard"
    session = response.cookies.get("jobgate_session")
    assert session and session.startswith("jgs_") and key not in response.headers["set-cookie"]
    set_cookie = response.headers["set-cookie"].lower()
    assert "httponly" in set_cookie and "samesite=strict" in set_cookie
    assert "path=/dashboard" in set_cookie
    return key


async def test_pages_need_an_operator(api: Api) -> None:
    for path in ("/dashboard", "/dashboard/jobs", "/dashboard/dlq", "/dashboard/webhooks"):
        response = await api.http.get(path)
        assert response.status_code == 303 and response.headers["location"] == "/dashboard/login"
    tenant_key = await api.key("acme")  # a tenant's API key is not an operator key
    response = await api.http.get("/dashboard", headers={"Authorization": f"Bearer {tenant_key}"})
    assert response.status_code == 303
    refused = await api.http.post("/dashboard/login", data={"key": "jgo_wrong"})
    assert refused.headers["location"] == "/dashboard/login?error=1"
    page = await api.http.get("/dashboard/login?error=1")
    assert 'id="login-error"' in page.text


async def test_overview_jobs_timeline_and_redrive(api: Api) -> None:
    await signed_in(api)
    key = await api.key("acme")
    headers = {"Authorization": f"Bearer {key}"}
    failing = {
        "endpoint": "/v1/chat/completions",
        "max_attempts": 1,
        "body": {
            "model": "sim-echo",
            "messages": [{"role": "user", "content": "x"}],
            "sim": {"fail_with": "server_error"},
        },
    }
    dead = (await api.http.post("/v1/jobs", json=failing, headers=headers)).json()
    await api.runtime.worker().run_once()
    waiting = (
        await api.http.post("/v1/jobs", json={**failing, "max_attempts": 3}, headers=headers)
    ).json()

    overview = (await api.http.get("/dashboard")).text
    assert 'data-tenant="acme"' in overview
    assert '<div class="value" id="total-queued">1</div>' in overview
    assert '<div class="value" id="total-dead">1</div>' in overview

    listing = (
        await api.http.get("/dashboard/jobs", params={"tenant": "acme", "status": "queued"})
    ).text
    assert f'data-job="{waiting["id"]}"' in listing and dead["id"] not in listing

    detail = (await api.http.get(f"/dashboard/jobs/{dead['id']}")).text
    assert "queued → running" in detail and "running → failed" in detail
    assert 'id="redrive"' in detail and "server_error" in detail

    dlq = (await api.http.get("/dashboard/dlq")).text
    assert f'data-job="{dead["id"]}"' in dlq

    cross_site = await api.http.post(
        f"/dashboard/jobs/{dead['id']}/redrive", headers={"Origin": "https://evil.example"}
    )
    assert cross_site.status_code == 401
    redriven = await api.http.post(
        f"/dashboard/jobs/{dead['id']}/redrive", headers={"Origin": api.url}
    )
    assert redriven.status_code == 303
    job = await api.runtime.storage.job_get(job_id=dead["id"])
    assert job is not None and job.state is JobState.QUEUED
    events = await api.runtime.storage.job_events(job_id=dead["id"])
    assert events[-1].actor == "operator:ada" and events[-1].reason == "redrive"
    assert "No dead letters" in (await api.http.get("/dashboard/dlq")).text

    hooks = (await api.http.get("/dashboard/webhooks")).text
    assert "No endpoints registered" in hooks
    missing = await api.http.get("/dashboard/jobs/job_nope")
    assert missing.status_code == 404


async def test_sign_out_ends_the_session_and_deletes_the_cookie(api: Api) -> None:
    await signed_in(api)
    session = api.http.cookies.get("jobgate_session")
    assert (await api.http.get("/dashboard")).status_code == 200
    response = await api.http.post("/dashboard/logout", headers={"Origin": api.url})
    assert response.status_code == 303
    deleted = response.headers["set-cookie"].lower()
    # The same Path as at sign-in, or the browser would keep the cookie.
    assert "jobgate_session=" in deleted and "path=/dashboard" in deleted
    assert "max-age=0" in deleted or "expires=thu, 01 jan 1970" in deleted
    # The old cookie, sent again by hand, is refused: the session is gone on the server.
    api.http.cookies.clear()
    replay = await api.http.get("/dashboard", headers={"Cookie": f"jobgate_session={session}"})
    assert replay.status_code == 303 and replay.headers["location"] == "/dashboard/login"


async def test_a_cookie_holding_the_key_or_a_made_up_session_is_refused(api: Api) -> None:
    key = await api.runtime.operators.create("ada")
    for name, value in (
        ("jobgate_operator", key),  # the cookie as it was before sessions
        ("jobgate_session", key),
        ("jobgate_session", "jgs_" + "A" * 43),
    ):
        response = await api.http.get("/dashboard", headers={"Cookie": f"{name}={value}"})
        assert response.status_code == 303, (name, value)


async def test_dashboard_answers_may_not_be_framed_or_sniffed(api: Api) -> None:
    for response in (
        await api.http.get("/dashboard/login"),
        await api.http.get("/dashboard"),  # the redirect to the login page
        await api.http.post("/dashboard/logout", headers={"Origin": "https://evil.example"}),
    ):
        assert response.headers["x-frame-options"] == "DENY"
        assert response.headers["x-content-type-options"] == "nosniff"
        assert "frame-ancestors 'none'" in response.headers["content-security-policy"]


async def test_the_origin_check_compares_scheme_host_and_port(api: Api) -> None:
    key = await api.runtime.operators.create("ada")
    host, port = api.url.removeprefix("http://").split(":")
    for origin in (
        f"https://{host}:{port}",  # another scheme
        f"http://{host}:{int(port) + 1}",  # another port
        f"http://{host}.evil.example:{port}",  # another host
        f"http://{host}",  # the default port, 80
        "null",
    ):
        response = await api.http.post(
            "/dashboard/login", data={"key": key}, headers={"Origin": origin}
        )
        assert response.status_code == 401, origin
    same = await api.http.post("/dashboard/login", data={"key": key}, headers={"Origin": api.url})
    assert same.status_code == 303 and same.headers["location"] == "/dashboard"
    by_referer = await api.http.post(
        "/dashboard/login",
        data={"key": key},
        headers={"Referer": f"https://{host}:{port}/dashboard/login"},
    )
    assert by_referer.status_code == 401


def test_the_origin_of_a_url_defaults_the_port() -> None:
    assert dashboard._origin_of("https://a.example") == ("https", "a.example", 443)
    assert dashboard._origin_of("HTTP://A.example:80/x") == ("http", "a.example", 80)
    assert dashboard._origin_of("null") is None
    assert dashboard._origin_of("http://a.example:99999") is None
