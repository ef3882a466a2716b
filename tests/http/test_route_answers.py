"""What `POST /v1/jobs`, `GET /v1/jobs/{id}`, `POST /v1/responses` and `GET /v1/responses/{id}`
answer, case by case, on both stores: valid requests, every problem the routes answer (bodies
the strict parse or the model refuses, other content types, bad ids and `wait` values, the
stream's own parameters and header), authentication before validation, job tokens (header and
`?token=`, a token without the `read` scope, another job's), idempotent replays and conflicts,
long polls, queue limits and body limits.

The expected answers are tests/http/route_answers.json (ids, times and request ids masked); a
changed answer is a changed API. After a deliberate change, rewrite the file with
`JOBGATE_RECORD_ANSWERS=1 pytest tests/http/test_route_answers.py -k sqlite` and review its
diff."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from jobgate.http.app import create_app, serve_app
from jobgate.process.runtime import Runtime
from jobgate.storage.records import LimitOverrides

CHAT = "/v1/chat/completions"
EXPECTED = Path(__file__).with_name("route_answers.json")
_IDS = re.compile(r"(job|resp|req)_[0-9A-Za-z]+")
_TOKEN = re.compile(r"jgt_[0-9A-Za-z._-]+")
_VOLATILE_HEADERS = {"x-request-id", "content-length"}


def job_body(text: str = "hello", **extra: Any) -> dict[str, Any]:
    return {
        "endpoint": CHAT,
        "body": {"model": "sim-echo", "messages": [{"role": "user", "content": text}]},
        **extra,
    }


async def streamed(chunk: bytes, count: int) -> AsyncIterator[bytes]:
    """A chunked body (no Content-Length): the limit is found while it is read."""
    for _ in range(count):
        yield chunk


def masked(value: Any) -> Any:
    """`value` with ids, tokens and Unix times replaced by placeholders."""
    if isinstance(value, dict):
        return {
            k: "<time>" if k.endswith("_at") and isinstance(v, int) else masked(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [masked(v) for v in value]
    if isinstance(value, str):
        return _TOKEN.sub("jgt_<token>", _IDS.sub(r"\1_<id>", value))
    return value


def answer(label: str, response: httpx.Response) -> dict[str, Any]:
    try:
        body: Any = response.json()
    except ValueError:
        body = response.text
    headers = {
        name: masked(value)
        for name, value in response.headers.items()
        if name not in _VOLATILE_HEADERS
    }
    assert re.fullmatch(r"req_[0-9a-f]{24}", response.headers["x-request-id"]), label
    return {"case": label, "status": response.status_code, "headers": headers, "body": masked(body)}


Send = Callable[..., Awaitable[httpx.Response]]


async def script(runtime: Runtime, http: httpx.AsyncClient) -> list[dict[str, Any]]:
    """Every case the four routes answer differently in kind, in one fixed order."""
    key = (await runtime.tenants.create("acme")).api_key
    other = (await runtime.tenants.create("beta")).api_key
    full_key = (await runtime.tenants.create("full")).api_key
    full = await runtime.tenants.authenticate(full_key)
    await runtime.storage.tenant_limits_set(
        tenant_id=full.id, overrides=LimitOverrides(allowed_models=("sim-echo",), max_queued=1)
    )
    runtime.limits.invalidate()
    auth = {"Authorization": f"Bearer {key}"}
    answers: list[dict[str, Any]] = []

    async def send(label: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
        response = await http.request(method, path, **kwargs)
        answers.append(answer(label, response))
        return response

    async def post(label: str, content: Any = None, **kwargs: Any) -> httpx.Response:
        return await send(label, "POST", "/v1/jobs", content=content, **kwargs)

    async def get(label: str, path: str, **kwargs: Any) -> httpx.Response:
        return await send(label, "GET", path, **kwargs)

    created = (await post("submit", json=job_body(), headers=auth)).json()
    keyed = {**auth, "Idempotency-Key": "key-1"}
    await post("submit keyed", json=job_body("once"), headers=keyed)
    await post("submit keyed replay", json=job_body("once"), headers=keyed)
    await post("submit keyed conflict", json=job_body("other"), headers=keyed)
    await post(
        "submit key too long", json=job_body(), headers={**auth, "Idempotency-Key": "x" * 300}
    )
    await post("submit no key", json=job_body())
    await post("submit unknown key", json=job_body(), headers={"Authorization": "Bearer jg_nope"})
    await post("submit basic auth", json=job_body(), headers={"Authorization": f"Basic {key}"})
    await post(
        "submit 401 before 400", json={"endpoint": 3}, headers={"Authorization": "Bearer jg_nope"}
    )
    await post(
        "submit 401 before 400, not an object",
        json=[1],
        headers={"Authorization": "Bearer jg_nope"},
    )
    json_headers = {**auth, "Content-Type": "application/json"}
    await post("submit truncated JSON", b'{"endpoint": "/v1/chat', headers=json_headers)
    await post("submit NaN", b'{"endpoint": NaN}', headers=json_headers)
    await post("submit too deep", b"[" * 200 + b"]" * 200, headers=json_headers)
    await post("submit invalid JSON, no key", b"{", headers={"Content-Type": "application/json"})
    await post("submit empty body", b"", headers=json_headers)
    await post("submit array", b"[1, 2]", headers=json_headers)
    await post("submit null", b"null", headers=json_headers)
    await post("submit string", b'"x"', headers=json_headers)
    await post("submit missing endpoint", json={"body": {"model": "sim-echo"}}, headers=auth)
    await post("submit unknown member", json={**job_body(), "surprise": 1}, headers=auth)
    await post("submit priority out of range", json=job_body(priority=99), headers=auth)
    await post("submit run_at and delay_s", json=job_body(run_at=10, delay_s=1), headers=auth)
    await post(
        "submit unknown model",
        json={"endpoint": CHAT, "body": {"model": "nope-model"}},
        headers=auth,
    )
    await post("submit unknown provider", json={**job_body(), "provider": "nope"}, headers=auth)
    await post(
        "submit refused webhook",
        json=job_body(webhook={"url": "http://127.0.0.1/hook"}),
        headers=auth,
    )
    await post(
        "submit text/plain", b'{"endpoint": "x"}', headers={**auth, "Content-Type": "text/plain"}
    )
    await post(
        "submit text/plain, no key", b'{"endpoint": "x"}', headers={"Content-Type": "text/plain"}
    )
    body = b'{"endpoint": "/v1/chat/completions", "body": {"model": "sim-echo"}}'
    await post(
        "submit charset", body, headers={**auth, "Content-Type": "application/json; charset=utf-8"}
    )
    await post(
        "submit +json", body, headers={**auth, "Content-Type": "application/merge-patch+json"}
    )
    await post("submit text/x+json", body, headers={**auth, "Content-Type": "text/x+json"})
    await post("submit no content type", body, headers=auth)
    await post("submit no content type, no key", body)
    await post("submit too large", b"{" + b" " * 2_000_000 + b"}", headers=json_headers)
    await post("submit too large streamed", streamed(b" " * 65_536, 40), headers=json_headers)
    full_auth = {"Authorization": f"Bearer {full_key}"}
    await post("submit to a full queue 1", json=job_body(), headers=full_auth)
    await post("submit to a full queue 2", json=job_body("more"), headers=full_auth)
    await post("submit Prefer wait", json=job_body("wait"), headers={**auth, "Prefer": "wait=1"})

    job = f"/v1/jobs/{created['id']}"
    await get("read", job, headers=auth)
    await send("read HEAD", "HEAD", job, headers=auth)
    for wait in ("0", "1", "0.5", "61", "60.5", "soon", "-1", "1e-1", "inf", "nan", "", " 1"):
        await get(f"read wait={wait!r}", job, params={"wait": wait}, headers=auth)
    await get("read wait twice", job + "?wait=0&wait=0", headers=auth)
    await get("read wait twice, last bad", job + "?wait=0&wait=x", headers=auth)
    await get("read unrelated query", job, params={"unrelated": "1"}, headers=auth)
    await get("read another tenant", job, headers={"Authorization": f"Bearer {other}"})
    await get("read no key", job)
    await get("read no key, bad wait", job, params={"wait": "soon"})
    await get("read unknown", "/v1/jobs/job_doesnotexist", headers=auth)
    await get("read bad id", "/v1/jobs/bad!id", headers=auth)
    await get("read bad id, bad wait", "/v1/jobs/bad!id?wait=soon", headers=auth)
    await get("read bad id, no key", "/v1/jobs/bad!id")
    await get("read long id", "/v1/jobs/" + "a" * 300, headers=auth)
    await get("read encoded id", "/v1/jobs/job%20x", headers=auth)

    tokens = f"{job}/tokens"
    reader = (await http.post(tokens, json={"scopes": ["read"]}, headers=auth)).json()["token"]
    canceller = (await http.post(tokens, json={"scopes": ["cancel"]}, headers=auth)).json()["token"]
    second = (await post("submit second", json=job_body("second"), headers=auth)).json()
    second_reader = (
        await http.post(f"/v1/jobs/{second['id']}/tokens", json={"scopes": ["read"]}, headers=auth)
    ).json()["token"]
    await get("read by token", job, headers={"Authorization": f"Bearer {reader}"})
    await get(
        "read by token, wait",
        job,
        params={"wait": "0"},
        headers={"Authorization": f"Bearer {reader}"},
    )
    await get(
        "read by token, bad wait",
        job,
        params={"wait": "x"},
        headers={"Authorization": f"Bearer {reader}"},
    )
    await get("read by token query", job, params={"token": reader})
    await get("read by token query, bad id", "/v1/jobs/bad!id", params={"token": reader})
    await get("read by token query twice", f"{job}?token=x&token={reader}")
    await get("read by key with token query", job, params={"token": "jgt_x.y"}, headers=auth)
    await get("read by cancel-only token", job, headers={"Authorization": f"Bearer {canceller}"})
    await get(
        "read by another job's token", job, headers={"Authorization": f"Bearer {second_reader}"}
    )
    await get("read by bad token", job, headers={"Authorization": "Bearer jgt_nope"})
    await get("read by bad token query", job, params={"token": "jgt_nope"})
    await get("read by API key as query", job, params={"token": key})

    async def create(label: str, content: Any = None, **kwargs: Any) -> httpx.Response:
        return await send(label, "POST", "/v1/responses", content=content, **kwargs)

    background = {"model": "sim-echo", "input": "hi", "background": True}
    created_response = await create("create", json=background, headers=auth)
    assert created_response.status_code == 200, created_response.text
    keyed_response = {**auth, "Idempotency-Key": "resp-key-1"}
    await create("create keyed", json=background, headers=keyed_response)
    await create("create keyed replay", json=background, headers=keyed_response)
    await create(
        "create keyed conflict", json={**background, "input": "other"}, headers=keyed_response
    )
    await create("create no key", json=background)
    await create("create unknown key", json=background, headers={"Authorization": "Bearer jg_nope"})
    await create(
        "create 401 before 400", json={"input": 1}, headers={"Authorization": "Bearer jg_nope"}
    )
    await create("create no model", json={"input": "no model", "background": True}, headers=auth)
    await create("create bad temperature", json={**background, "temperature": "hot"}, headers=auth)
    await create("create unknown model", json={**background, "model": "nope-model"}, headers=auth)
    await create(
        "create background without store", json={**background, "store": False}, headers=auth
    )
    await create("create NaN", b'{"model": NaN}', headers=json_headers)
    await create("create array", b"[1]", headers=json_headers)
    await create("create null", b"null", headers=json_headers)
    await create("create empty body", b"", headers=json_headers)
    await create(
        "create text/plain",
        b'{"model": "sim-echo"}',
        headers={**auth, "Content-Type": "text/plain"},
    )
    await create("create no content type", b'{"model": "sim-echo"}', headers=auth)
    await create(
        "create huge integer", json={**background, "max_output_tokens": 10**30}, headers=auth
    )
    await create(
        "create stream over the bound", json={**background, "stream": True}, headers=full_auth
    )

    response = f"/v1/responses/{created_response.json()['id']}"
    await get("retrieve", response, headers=auth)
    for wait in ("0", "1", "61", "soon", "nan"):
        await get(f"retrieve wait={wait!r}", response, params={"wait": wait}, headers=auth)
    await get("retrieve stream=false", response, params={"stream": "false"}, headers=auth)
    await get("retrieve stream=maybe", response, params={"stream": "maybe"}, headers=auth)
    await get(
        "retrieve starting_after=-1",
        response,
        params={"stream": "true", "starting_after": "-1"},
        headers=auth,
    )
    await get(
        "retrieve starting_after=x, wait=x",
        response,
        params={"starting_after": "x", "wait": "x"},
        headers=auth,
    )
    await get("retrieve unrelated query", response, params={"unrelated": "1"}, headers=auth)
    await get("retrieve Last-Event-ID", response, headers={**auth, "Last-Event-ID": "5"})
    await get("retrieve bad Last-Event-ID", response, headers={**auth, "Last-Event-ID": "five"})
    await get(
        "retrieve bad Last-Event-ID, bad wait",
        response,
        params={"wait": "x"},
        headers={**auth, "Last-Event-ID": "five"},
    )
    await get("retrieve another tenant", response, headers={"Authorization": f"Bearer {other}"})
    await get("retrieve no key", response)
    await get("retrieve no key, bad id", "/v1/responses/bad!id")
    await get("retrieve unknown", "/v1/responses/resp_doesnotexist", headers=auth)
    await get("retrieve a native job", f"/v1/responses/{created['id']}", headers=auth)
    await get("retrieve bad id", "/v1/responses/bad!id", headers=auth)
    await get("retrieve by job token", response, headers={"Authorization": f"Bearer {reader}"})
    await http.post(f"{response}/cancel", headers=auth)
    await get("retrieve cancelled", response, headers=auth)
    await http.post(f"{job}/cancel", headers=auth)
    await get("read cancelled", job, headers=auth)
    await get("read cancelled by token", job, headers={"Authorization": f"Bearer {reader}"})
    await http.delete(job, headers=auth)
    await get("read purged by token", job, headers={"Authorization": f"Bearer {reader}"})
    await get("read purged by key", job, headers=auth)
    return answers


@pytest.fixture
def no_tracer_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    """The server's front steps aside while spans are recorded; a process has one global tracer
    provider and tests/services/test_observability.py installs one for the rest of the process.
    Unset it, so the path taken does not depend on which tests ran before in this worker."""
    try:
        from opentelemetry import trace
    except ImportError:  # no OpenTelemetry: nothing is ever recorded
        return
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", None)


@pytest.mark.asyncio
@pytest.mark.usefixtures("no_tracer_provider")
@pytest.mark.parametrize("served", ["front", "logged", "stack", "router"])
async def test_each_case_answers_as_recorded(runtime: Runtime, served: str) -> None:
    """`front`: what the server runs (http.front, then http.routes.hot' dispatch); `logged`:
    the same with the access log and CORS on (no request here has an Origin: a CORS layer
    changes nothing of its answer); `stack`: the app itself (as while a tracer provider
    records); `router`: under a root path, where FastAPI's router matches the declared routes,
    which run the same handlers."""
    ctx = runtime.app_context()
    if served == "logged":
        update = {"access_log": True, "cors_origins": ("https://app.example",)}
        ctx = dataclasses.replace(ctx, settings=ctx.settings.model_copy(update=update))
    app = create_app(ctx) if served in ("stack", "router") else serve_app(ctx)
    root = "/api" if served == "router" else ""
    transport = httpx.ASGITransport(app=app, root_path=root)
    base_url = f"http://jobgate.test{root}"
    async with httpx.AsyncClient(transport=transport, base_url=base_url) as http:
        answers = await script(runtime, http)
    if os.environ.get("JOBGATE_RECORD_ANSWERS"):
        EXPECTED.write_text(json.dumps(answers, indent=1, ensure_ascii=False) + "\n")
    expected = json.loads(EXPECTED.read_text())
    assert [a["case"] for a in answers] == [e["case"] for e in expected]
    for got, want in zip(answers, expected, strict=True):
        assert got == want, got["case"]
    assert all(a["status"] < 500 for a in answers)
