"""The operator dashboard over real HTTP: sign-in, pages, redrive, origin checks."""

from __future__ import annotations

import pytest

from jobgate.domain.states import JobState
from tests.api_server import Api


async def signed_in(api: Api) -> str:
    key = await api.runtime.operators.create("ada")
    response = await api.http.post("/dashboard/login", data={"key": key})
    assert response.status_code == 303 and response.headers["location"] == "/dashboard"
    cookie = response.cookies.get("jobgate_operator")
    assert cookie == key
    assert "httponly" in response.headers["set-cookie"].lower()
    assert "samesite=strict" in response.headers["set-cookie"].lower()
    api.http.cookies.set("jobgate_operator", key)
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


@pytest.mark.parametrize("path", ["/dashboard/logout"])
async def test_logout_clears_the_cookie(api: Api, path: str) -> None:
    await signed_in(api)
    response = await api.http.post(path)
    assert response.status_code == 303
    assert 'jobgate_operator=""' in response.headers["set-cookie"] or (
        "max-age=0" in response.headers["set-cookie"].lower()
    )
