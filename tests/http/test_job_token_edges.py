"""What surrounds job tokens at the edge, over real HTTP: CORS for the configured origins on
the routes a token reaches only (preflights answered, answers marked; another origin, method
or route refused), JOBGATE_CORS_ORIGINS read and checked, and a token never reaching a log
(the access log writes the path, never `?token=`)."""

from __future__ import annotations

import logging

import pytest

from jobgate import errors
from jobgate.config import Settings, load_settings
from tests.api_server import Api

APP = "https://app.example.com"
CHAT = "/v1/chat/completions"


@pytest.fixture
def backend() -> str:
    return "sqlite"  # the edge's headers: no storage difference to cover


@pytest.fixture
def settings() -> Settings:
    return Settings(
        database_url="sqlite:///unused.db",
        shutdown_grace_s=0,
        cors_origins=(APP, "http://localhost:5173"),
        access_log=True,
    )


async def job_and_token(api: Api, scopes: list[str]) -> tuple[str, str]:
    key = await api.key("acme")
    body = {"model": "sim-echo", "messages": [{"role": "user", "content": "hi"}]}
    headers = {"Authorization": f"Bearer {key}"}
    submitted = await api.http.post(
        "/v1/jobs", json={"endpoint": CHAT, "body": body}, headers=headers
    )
    job_id = submitted.json()["id"]
    created = await api.http.post(
        f"/v1/jobs/{job_id}/tokens", json={"scopes": scopes}, headers=headers
    )
    return job_id, created.json()["token"]


def preflight(origin: str, method: str) -> dict[str, str]:
    return {
        "Origin": origin,
        "Access-Control-Request-Method": method,
        "Access-Control-Request-Headers": "authorization, last-event-id",
    }


async def test_a_configured_origin_may_call_the_token_routes(api: Api) -> None:
    job_id, token = await job_and_token(api, ["read", "stream", "cancel"])
    for suffix, method in (
        ("", "GET"),
        ("/stream", "GET"),
        ("/events", "GET"),
        ("/cancel", "POST"),
    ):
        path = f"/v1/jobs/{job_id}{suffix}"
        answer = await api.http.options(path, headers=preflight(APP, method))
        assert answer.status_code == 204, (path, answer.text)
        assert answer.headers["access-control-allow-origin"] == APP
        assert answer.headers["access-control-allow-methods"] == method
        allowed = answer.headers["access-control-allow-headers"].lower()
        assert "authorization" in allowed and "last-event-id" in allowed
        assert answer.headers["vary"] == "Origin"
        assert "access-control-allow-credentials" not in answer.headers
        assert answer.headers["x-request-id"].startswith("req_")

    read = await api.http.get(
        f"/v1/jobs/{job_id}", params={"token": token}, headers={"Origin": APP}
    )
    assert read.status_code == 200
    assert read.headers["access-control-allow-origin"] == APP
    assert "Retry-After" in read.headers["access-control-expose-headers"]
    assert "Origin" in read.headers["vary"]
    refused = await api.http.get(
        f"/v1/jobs/{job_id}", params={"token": "jgt_x.y"}, headers={"Origin": APP}
    )
    # The page may read why it was refused.
    assert refused.status_code == 401 and refused.headers["access-control-allow-origin"] == APP


async def test_another_origin_method_or_route_is_not_opened(api: Api) -> None:
    job_id, token = await job_and_token(api, ["read"])
    path = f"/v1/jobs/{job_id}"
    for origin, method, target in (
        ("https://evil.example.com", "GET", path),
        ("https://app.example.com:8443", "GET", path),
        (APP, "POST", path),
        (APP, "DELETE", path),
        (APP, "GET", f"{path}/cancel"),
    ):
        answer = await api.http.options(target, headers=preflight(origin, method))
        assert answer.status_code == 403, (origin, method, target)
        assert answer.json()["code"] == "cors_refused"
        assert "access-control-allow-origin" not in answer.headers
    read = await api.http.get(
        path, params={"token": token}, headers={"Origin": "https://evil.example.com"}
    )
    assert read.status_code == 200 and "access-control-allow-origin" not in read.headers
    for method, target in (
        ("POST", "/v1/jobs"),
        ("POST", f"{path}/tokens"),
        ("DELETE", path.replace("/v1/jobs/", "/v1/responses/")),
        ("GET", "/v1/jobs"),
    ):
        answer = await api.http.options(target, headers=preflight(APP, method))
        assert "access-control-allow-origin" not in answer.headers, (method, target)
        assert answer.status_code >= 400
    listed = await api.http.get("/v1/jobs", headers={"Origin": APP})
    assert "access-control-allow-origin" not in listed.headers


async def test_no_token_reaches_a_log(api: Api, caplog: pytest.LogCaptureFixture) -> None:
    job_id, token = await job_and_token(api, ["read", "stream"])
    caplog.set_level(logging.DEBUG)
    # Another test in this process may have configured logging without the access log, which
    # leaves jobgate.access at WARNING: the access log is on here whatever ran before.
    caplog.set_level(logging.INFO, logger="jobgate.access")
    await api.http.get(f"/v1/jobs/{job_id}", params={"token": token})
    await api.http.get(f"/v1/jobs/{job_id}/events", params={"token": token})
    await api.http.get(f"/v1/jobs/{job_id}", params={"token": token + "x"})
    await api.http.get(f"/v1/jobs/{job_id}", headers={"Authorization": f"Bearer {token}"})
    await api.http.post("/v1/jobs", headers={"Authorization": f"Bearer {token}"}, json={})
    # The server's records (this test's own HTTP client logs the URLs it sends).
    server = [r for r in caplog.records if r.name.split(".")[0] in ("jobgate", "uvicorn")]
    paths = [getattr(r, "path", None) for r in server if r.name == "jobgate.access"]
    assert f"/v1/jobs/{job_id}" in paths and f"/v1/jobs/{job_id}/events" in paths
    for record in server:
        text = f"{record.getMessage()} {record.__dict__}"
        assert token.split(".")[1] not in text  # not even the signature alone


def test_the_origins_are_read_from_the_environment() -> None:
    env = {"JOBGATE_CORS_ORIGINS": "https://App.example.com, http://localhost:5173"}
    assert load_settings(env, config_path=None).cors_origins == (
        "https://app.example.com",
        "http://localhost:5173",
    )
    assert load_settings({}, config_path=None).cors_origins == ()
    assert load_settings({"JOBGATE_CORS_ORIGINS": "*"}).cors_origins == ("*",)
    for bad in ("https://app.example.com/", "app.example.com", "https://a.com/path", "ftp://a"):
        with pytest.raises(errors.ConfigError, match="JOBGATE_CORS_ORIGINS"):
            load_settings({"JOBGATE_CORS_ORIGINS": bad})


def test_an_error_message_quoting_a_token_is_redacted() -> None:
    from jobgate.http.middleware import request_id

    described = request_id.describe(ValueError("no job for jgt_MS4xLjE3OTY.-ekrB_aob here"))
    assert described == "ValueError: no job for [redacted] here"
