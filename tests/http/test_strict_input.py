"""Issue 13's red-team values, each sent as raw bytes to a real server: every one answers 400
problem+json naming the field (or 413 for size), nothing is stored, and the server stays up.
Also: unknown models are refused (model_not_found) on both surfaces, query parameters have
ranges, and an unhandled error is logged with its traceback and answered with a request id."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from jobgate import errors
from jobgate.domain import ranges
from jobgate.http import strict_json
from tests.api_server import Api

CHAT = '"endpoint": "/v1/chat/completions"'
MESSAGES = '"messages": [{"role": "user", "content": "hi"}]'


def _job(*, body_extra: str = "", top: str = "", content: str = '"hi"') -> bytes:
    messages = f'[{{"role": "user", "content": {content}}}]'
    body = f'{{"model": "sim-echo", "messages": {messages}{body_extra}}}'
    return f'{{{CHAT}, "body": {body}{top}}}'.encode()


DEEP = "[" * 300 + "]" * 300

# (name, route, raw body, expected param (None: not checked))
RED_TEAM: list[tuple[str, str, bytes, str | None]] = [
    ("execution_timeout_s 3e11", "/v1/jobs", _job(top=', "execution_timeout_s": 3e11'),
     "execution_timeout_s"),
    ("execution_timeout_s 1e300", "/v1/jobs", _job(top=', "execution_timeout_s": 1e300'),
     "execution_timeout_s"),
    ("start_timeout_s 1e300", "/v1/jobs", _job(top=', "start_timeout_s": 1e300'),
     "start_timeout_s"),
    ("start_timeout_s 0", "/v1/jobs", _job(top=', "start_timeout_s": 0'), "start_timeout_s"),
    ("NaN", "/v1/jobs", _job(top=', "execution_timeout_s": NaN'), "execution_timeout_s"),
    ("Infinity", "/v1/jobs", _job(top=', "start_timeout_s": Infinity'), "start_timeout_s"),
    ("-Infinity in body", "/v1/jobs", _job(body_extra=', "temperature": -Infinity'),
     "body.temperature"),
    ("1e999", "/v1/jobs", _job(body_extra=', "temperature": 1e999'), "body.temperature"),
    ("int beyond 64 bits in metadata", "/v1/jobs",
     _job(top=', "metadata": {"n": 123456789012345678901234567890}'), "metadata.n"),
    ("int 2**64 - 1 in body", "/v1/jobs", _job(body_extra=', "seed": 18446744073709551615'),
     "body.seed"),
    ("int beyond 64 bits as priority", "/v1/jobs",
     _job(top=', "priority": 99999999999999999999999'), "priority"),
    ("lone surrogate in content", "/v1/jobs", _job(content='"\\ud800"'),
     "body.messages.0.content"),
    ("lone surrogate in a metadata key", "/v1/jobs", _job(top=', "metadata": {"\\udc00": "x"}'),
     "metadata"),
    ("NUL in content", "/v1/jobs", _job(content='"a\\u0000b"'), "body.messages.0.content"),
    ("nesting 300 deep", "/v1/jobs", _job(body_extra=f', "x": {DEEP}'), None),
    ("nesting 300 deep in metadata", "/v1/jobs", _job(top=f', "metadata": {{"x": {DEEP}}}'),
     None),
    ("sim.latency_s 1e300", "/v1/jobs", _job(body_extra=', "sim": {"latency_s": 1e300}'),
     "body.sim.latency_s"),
    ("sim.fail_times 1e18", "/v1/jobs",
     _job(body_extra=', "sim": {"fail_with": "server_error", "fail_times": 1000000000000000000}'),
     "body.sim.fail_times"),
    ("max_attempts 0", "/v1/jobs", _job(top=', "max_attempts": 0'), "max_attempts"),
    ("max_tokens 10**15 (past the provider's output bound)", "/v1/jobs",
     _job(body_extra=', "max_tokens": 1000000000000000'), "body.max_tokens"),
    ("max_completion_tokens 0", "/v1/jobs", _job(body_extra=', "max_completion_tokens": 0'),
     "body.max_completion_tokens"),
    ("unknown field", "/v1/jobs", _job(top=', "colour": "red"'), "colour"),
    ("not JSON", "/v1/jobs", b'{"endpoint": ', None),
    ("responses: NaN temperature", "/v1/responses",
     b'{"model": "sim-echo", "input": "hi", "background": true, "temperature": NaN}',
     "temperature"),
    ("responses: surrogate in input", "/v1/responses",
     b'{"model": "sim-echo", "input": "\\ud800", "background": true}', "input"),
    ("responses: surrogate metadata key", "/v1/responses",
     b'{"model": "sim-echo", "input": "x", "background": true, "metadata": {"\\ud800": "v"}}',
     None),
    ("responses: deep input", "/v1/responses",
     b'{"model": "sim-echo", "background": true, "input": [{"role": "user", "content": '
     + DEEP.encode() + b"}]}", None),
    ("responses: int beyond 64 bits", "/v1/responses",
     b'{"model": "sim-echo", "input": "x", "background": true, '
     b'"max_output_tokens": 123456789012345678901234567890}', "max_output_tokens"),
    ("responses: max_output_tokens past the provider's output bound", "/v1/responses",
     b'{"model": "sim-echo", "input": "x", "background": true, "max_output_tokens": 2147483647}',
     "max_output_tokens"),
    ("responses: sim.latency_s 1e300", "/v1/responses",
     b'{"model": "sim-echo", "input": "x", "background": true, "sim": {"latency_s": 1e300}}',
     "sim.latency_s"),
    ("webhook endpoint: surrogate", "/v1/webhook_endpoints",
     b'{"url": "https://example.com/h", "description": "\\ud800"}', None),
    ("webhook endpoint: Infinity", "/v1/webhook_endpoints",
     b'{"url": "https://example.com/h", "include_result": Infinity}', None),
]  # fmt: skip


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}


async def test_red_team_values_answer_400_naming_the_field(api: Api) -> None:
    key = await api.key("acme")
    for name, route, raw, param in RED_TEAM:
        response = await api.http.post(route, content=raw, headers=_auth(key))
        assert response.status_code == 400, (name, response.status_code, response.text)
        assert response.headers["content-type"] == "application/problem+json"
        problem = response.json()
        assert problem["status"] == 400 and problem["error"]["type"] == "invalid_request_error"
        if param is not None:
            assert problem["error"]["param"] == param, (name, problem)
    jobs = await api.runtime.storage.job_list(tenant_id=(await _tenant(api, key)), limit=10)
    assert jobs == []  # nothing invalid is stored
    assert (await api.http.get("/healthz")).status_code == 200


async def _tenant(api: Api, key: str) -> str:
    return (await api.runtime.tenants.authenticate(key)).id


@pytest.mark.parametrize(
    ("route", "content_type"),
    [
        ("/v1/jobs", "application/x-www-form-urlencoded"),  # what `curl -d` sends by default
        ("/v1/jobs", "text/plain"),
        ("/v1/responses", "application/x-www-form-urlencoded"),
        ("/v1/webhook_endpoints", "text/plain; charset=utf-8"),
        ("/v1/jobs/bulk", "multipart/form-data; boundary=x"),
    ],
)
async def test_a_body_not_sent_as_json_says_to_send_content_type_json(
    api: Api, route: str, content_type: str
) -> None:
    key = await api.key("acme")
    headers = {"Authorization": f"Bearer {key}", "Content-Type": content_type}
    response = await api.http.post(route, content=_job(), headers=headers)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_content_type"
    assert "Content-Type: application/json" in error["message"]
    assert content_type.split(";")[0] in error["message"]


async def test_a_json_body_with_a_json_content_type_is_read(api: Api) -> None:
    key = await api.key("acme")
    for content_type in ("application/json; charset=utf-8", "application/vnd.api+json"):
        headers = {"Authorization": f"Bearer {key}", "Content-Type": content_type}
        response = await api.http.post("/v1/jobs", content=_job(), headers=headers)
        assert response.status_code == 202, (content_type, response.text)


async def test_a_patch_and_a_recover_refuse_the_same_values(api: Api) -> None:
    key = await api.key("acme")
    for route, raw in (
        ("/v1/webhook_endpoints/we_x/recover", b'{"since": 1e300}'),
        ("/v1/webhook_endpoints/we_x/recover", b'{"since": NaN}'),
        ("/v1/webhook_endpoints/we_x/rotate_secret", b'{"grace_period_s": 1e19}'),
    ):
        response = await api.http.post(route, content=raw, headers=_auth(key))
        assert response.status_code == 400, (route, raw, response.text)
    response = await api.http.patch(
        "/v1/webhook_endpoints/we_x", content=b'{"description": "\\ud800"}', headers=_auth(key)
    )
    assert response.status_code == 400


QUERIES: list[tuple[str, dict[str, str]]] = [
    ("/v1/jobs/job_x", {"wait": "nan"}),
    ("/v1/jobs/job_x", {"wait": "inf"}),
    ("/v1/jobs/job_x", {"wait": "1e300"}),
    ("/v1/jobs/job_x", {"wait": "61"}),
    ("/v1/jobs", {"limit": "0"}),
    ("/v1/jobs", {"limit": "99999999999999999999999"}),
    ("/v1/jobs", {"after": "job_\x00"}),
    ("/v1/jobs", {"after": "x" * 300}),
    ("/v1/jobs/job_x/events", {"after": "-1"}),
    ("/v1/jobs/job_x/events", {"after": str(2**31)}),
    ("/v1/responses/resp_x", {"wait": "Infinity"}),
    ("/v1/responses/resp_x", {"starting_after": str(2**64)}),
    ("/v1/webhook_endpoints", {"limit": "101"}),
    ("/v1/webhook_endpoints", {"after": "we_\x00"}),
    ("/v1/jobs/job_%00", {}),
]


async def test_query_and_path_values_have_ranges(api: Api) -> None:
    key = await api.key("acme")
    for path, params in QUERIES:
        response = await api.http.get(path, params=params, headers=_auth(key))
        assert response.status_code == 400, (path, params, response.text)


async def test_openapi_shows_the_ranges(api: Api) -> None:
    schema = (await api.http.get("/openapi.json")).json()
    submit = schema["components"]["schemas"]["SubmitJobRequest"]["properties"]
    timeout = submit["execution_timeout_s"]["anyOf"][0]
    assert timeout["maximum"] == ranges.MAX_TIMEOUT_S and timeout["minimum"] > 0
    assert submit["priority"]["anyOf"][0]["maximum"] == ranges.PRIORITY_MAX
    sim = schema["components"]["schemas"]["SimDirectives"]["properties"]
    assert sim["latency_s"]["anyOf"][0]["maximum"] == ranges.SIM_MAX_LATENCY_S
    assert sim["fail_times"]["anyOf"][0]["maximum"] == ranges.SIM_MAX_FAIL_TIMES
    get_job = schema["paths"]["/v1/jobs/{job_id}"]["get"]["parameters"]
    wait = next(p for p in get_job if p["name"] == "wait")["schema"]["anyOf"][0]
    assert wait["maximum"] == ranges.MAX_WAIT_S


# -- models no provider serves ---------------------------------------------------------------


@pytest.mark.parametrize("model", ["gpt-4o", "claude-3-5-sonnet", "sim", "simulator-x"])
async def test_unknown_models_are_refused_on_the_native_surface(api: Api, model: str) -> None:
    key = await api.key("acme")
    body: dict[str, Any] = {
        "endpoint": "/v1/chat/completions",
        "body": {"model": model, "messages": [{"role": "user", "content": "hi"}]},
    }
    response = await api.http.post("/v1/jobs", json=body, headers=_auth(key))
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "model_not_found" and error["param"] == "body.model"
    assert model in error["message"] and "sim" in error["message"]
    named = await api.http.post(
        "/v1/jobs", json={**body, "provider": "sim"}, headers=_auth(key)
    )  # naming the simulator does not make it answer for another model
    assert named.status_code == 400 and named.json()["error"]["code"] == "model_not_found"


async def test_unknown_models_are_refused_on_the_openai_surface(api: Api) -> None:
    key = await api.key("acme")
    response = await api.http.post(
        "/v1/responses",
        json={"model": "gpt-4o", "input": "hi", "background": True},
        headers=_auth(key),
    )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "model_not_found" and error["param"] == "model"
    assert "'gpt-4o'" in error["message"]


async def test_sim_models_still_run(api: Api) -> None:
    key = await api.key("acme")
    response = await api.http.post(
        "/v1/jobs",
        json={"endpoint": "/v1/chat/completions", "body": {"model": "sim-echo", "messages": []}},
        headers=_auth(key),
    )
    assert response.status_code in (202, 400)
    assert response.json().get("error", {}).get("code") != "model_not_found"


# -- diagnosable 500s ------------------------------------------------------------------------


async def test_an_unhandled_error_is_logged_with_its_traceback_and_request_id(
    api: Api, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = await api.key("acme")
    provider_key = "sk-" + "live" * 4  # built here, so the traceback's source line lacks it

    async def broken(**_kwargs: Any) -> Any:
        raise RuntimeError(f"boom with {key} and Bearer {provider_key}")

    monkeypatch.setattr(api.runtime.storage, "job_status", broken)
    with caplog.at_level(logging.ERROR, logger="jobgate.http.problems"):
        response = await api.http.get("/v1/jobs/job_x", headers=_auth(key))
    assert response.status_code == 500
    rid = response.headers["x-request-id"]
    assert rid.startswith("req_") and response.json()["request_id"] == rid
    assert rid in response.json()["error"]["message"]
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert rid in logged and "RuntimeError: boom" in logged
    assert "in broken" in logged  # the traceback's frames
    assert key not in logged and provider_key not in logged and "[redacted]" in logged
    assert "Exception in ASGI application" not in logged  # logged once, by jobgate
    assert (await api.http.get("/healthz")).status_code == 200


async def test_every_answer_carries_a_request_id(api: Api) -> None:
    first = await api.http.get("/healthz")
    second = await api.http.get("/v1/jobs")
    assert first.headers["x-request-id"] != second.headers["x-request-id"]
    assert second.status_code == 401 and second.headers["x-request-id"].startswith("req_")


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ('{"a": {"n": NaN}}', "a.n"),
        ('{"body": {"messages": [{"role": "user", "content": "\\ud800"}]}}',
         "body.messages.0.content"),
        ('[1, 2, Infinity]', "2"),
        ("NaN", None),
        ('{"x": "a\\"b,{[", "y": 1e999}', "y"),
        ('{"metadata": {"\\udc00": 1}}', "metadata"),
    ],
)  # fmt: skip
def test_a_parse_error_names_the_member_being_read(text: str, path: str | None) -> None:
    with pytest.raises(errors.InvalidRequest) as caught:
        strict_json.parse(text.encode())
    assert caught.value.param == path and caught.value.code == "invalid_json"
