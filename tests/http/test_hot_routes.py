"""The hot path (http.hot_routes) answers exactly as the FastAPI routes it bypasses.

The same script of requests (valid, invalid, every problem the two routes can answer, auth
failures, idempotent replays and conflicts, long polls, queue limits) runs against an app with
the hot path and one without it, each over its own tenants of one runtime; the answers must be
equal once job ids and times are masked. A spy on FastAPI's router proves the hot path, not a
fall-through, answered the ordinary requests."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from jobgate.http.app import create_app
from jobgate.http.body_limit import BodyLimitMiddleware
from jobgate.http.front import HotFront
from jobgate.process.runtime import Runtime
from jobgate.storage.records import LimitOverrides

CHAT = "/v1/chat/completions"
_JOB_ID = re.compile(r"(job|resp)_[0-9A-Za-z]+")
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
    """`value` with job ids and Unix times replaced by placeholders."""
    if isinstance(value, dict):
        return {
            k: "<time>" if k.endswith("_at") and isinstance(v, int) else masked(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [masked(v) for v in value]
    if isinstance(value, str):
        return _JOB_ID.sub(r"\1_<id>", value)
    return value


def answer(response: httpx.Response) -> dict[str, Any]:
    try:
        body: Any = response.json()
    except ValueError:
        body = response.text
    headers = {
        name: _JOB_ID.sub(r"\1_<id>", value)
        for name, value in response.headers.items()
        if name not in _VOLATILE_HEADERS
    }
    return {"status": response.status_code, "headers": headers, "body": masked(body)}


class RouterSpy:
    """FastAPI's router, recording the paths that reached it."""

    def __init__(self, router: Any) -> None:
        self._router = router
        self.paths: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._router, name)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.paths.append(f"{scope['method']} {scope['path']}")
        await self._router(scope, receive, send)


async def script(runtime: Runtime, http: httpx.AsyncClient, side: str) -> list[dict[str, Any]]:
    """Every request the two routes answer differently in kind, in one fixed order."""
    key = (await runtime.tenants.create(f"acme-{side}")).api_key
    other = (await runtime.tenants.create(f"beta-{side}")).api_key
    full_key = (await runtime.tenants.create(f"full-{side}")).api_key
    full = await runtime.tenants.authenticate(full_key)
    await runtime.storage.tenant_limits_set(
        tenant_id=full.id, overrides=LimitOverrides(allowed_models=("sim-echo",), max_queued=1)
    )
    runtime.limits.invalidate()
    auth = {"Authorization": f"Bearer {key}"}
    answers: list[dict[str, Any]] = []

    async def post(content: Any = None, **kwargs: Any) -> httpx.Response:
        response = await http.post("/v1/jobs", content=content, **kwargs)
        answers.append(answer(response))
        return response

    async def get(path: str, **kwargs: Any) -> httpx.Response:
        response = await http.get(path, **kwargs)
        answers.append(answer(response))
        return response

    created = (await post(json=job_body(), headers=auth)).json()
    # Idempotency: first use, replay, conflict, an invalid key.
    keyed = {**auth, "Idempotency-Key": f"key-{side}"}
    await post(json=job_body("once"), headers=keyed)
    await post(json=job_body("once"), headers=keyed)
    await post(json=job_body("other"), headers=keyed)
    await post(json=job_body(), headers={**auth, "Idempotency-Key": "x" * 300})
    # Authentication.
    await post(json=job_body())
    await post(json=job_body(), headers={"Authorization": "Bearer jg_nope"})
    await post(json=job_body(), headers={"Authorization": f"Basic {key}"})
    await post(json={"endpoint": 3}, headers={"Authorization": "Bearer jg_nope"})
    # Bodies the strict parse refuses, and bodies the model refuses.
    json_headers = {**auth, "Content-Type": "application/json"}
    await post(b'{"endpoint": "/v1/chat', headers=json_headers)
    await post(b'{"endpoint": NaN}', headers=json_headers)
    await post(b"", headers=json_headers)
    await post(b"[1, 2]", headers=json_headers)
    await post(b"null", headers=json_headers)
    await post(json={"body": {"model": "sim-echo"}}, headers=auth)
    await post(json={**job_body(), "surprise": 1}, headers=auth)
    await post(json=job_body(priority=99), headers=auth)
    await post(json=job_body(run_at=10, delay_s=1), headers=auth)
    await post(json={"endpoint": CHAT, "body": {"model": "nope-model"}}, headers=auth)
    await post(json={**job_body(), "provider": "nope"}, headers=auth)
    await post(json=job_body(webhook={"url": "http://127.0.0.1/hook"}), headers=auth)
    # Content types other than plain JSON.
    await post(b'{"endpoint": "x"}', headers={**auth, "Content-Type": "text/plain"})
    body = b'{"endpoint": "/v1/chat/completions", "body": {"model": "sim-echo"}}'
    await post(body, headers={**auth, "Content-Type": "application/json; charset=utf-8"})
    await post(body, headers={**auth, "Content-Type": "application/merge-patch+json"})
    await post(body, headers=auth)  # no content type at all
    # Too large, declared, and too large while streamed without a declared length.
    await post(b"{" + b" " * 2_000_000 + b"}", headers=json_headers)
    await post(streamed(b" " * 65_536, 40), headers=json_headers)
    # A queue limit, then a long poll on the submit that times out.
    full_auth = {"Authorization": f"Bearer {full_key}"}
    await post(json=job_body(), headers=full_auth)
    await post(json=job_body("more"), headers=full_auth)
    await post(json=job_body("wait"), headers={**auth, "Prefer": "wait=1"})
    # Reads: plain, long polls, unknown, another tenant's, refused ids and queries, no key.
    job = f"/v1/jobs/{created['id']}"
    await get(job, headers=auth)
    await get(job, params={"wait": "0"}, headers=auth)
    await get(job, params={"wait": "1"}, headers=auth)
    await get(job, params={"wait": "61"}, headers=auth)
    await get(job, params={"wait": "soon"}, headers=auth)
    await get(job, params={"wait": "-1"}, headers=auth)
    await get(job + "?wait=0&wait=0", headers=auth)
    await get(job, params={"unrelated": "1"}, headers=auth)
    await get(job, headers={"Authorization": f"Bearer {other}"})
    await get(job)
    await get("/v1/jobs/job_doesnotexist", headers=auth)
    await get("/v1/jobs/bad!id", headers=auth)
    await get("/v1/jobs/bad!id")
    await get("/v1/jobs/" + "a" * 300, headers=auth)

    # Responses: creates (replayed, conflicting, unauthenticated, refused by the model, by
    # the service, by the strict parse, another content type), then reads (plain, long polls,
    # refused queries and ids, the stream's own parameters and header, another tenant's, no
    # key, a native job by this path).
    async def create(content: Any = None, **kwargs: Any) -> httpx.Response:
        created = await http.post("/v1/responses", content=content, **kwargs)
        answers.append(answer(created))
        return created

    background = {"model": "sim-echo", "input": "hi", "background": True}
    created_response = await create(json=background, headers=auth)
    assert created_response.status_code == 200, created_response.text
    keyed_response = {**auth, "Idempotency-Key": f"resp-key-{side}"}
    await create(json=background, headers=keyed_response)
    await create(json=background, headers=keyed_response)
    await create(json={**background, "input": "other"}, headers=keyed_response)
    await create(json=background)
    await create(json=background, headers={"Authorization": "Bearer jg_nope"})
    await create(json={"input": "no model", "background": True}, headers=auth)
    await create(json={**background, "temperature": "hot"}, headers=auth)
    await create(json={**background, "model": "nope-model"}, headers=auth)
    await create(json={**background, "background": True, "store": False}, headers=auth)
    await create(b'{"model": NaN}', headers=json_headers)
    await create(b"[1]", headers=json_headers)
    await create(b'{"model": "sim-echo"}', headers={**auth, "Content-Type": "text/plain"})
    await create(json={**background, "max_output_tokens": 10**30}, headers=auth)
    response = f"/v1/responses/{created_response.json()['id']}"
    await get(response, headers=auth)
    await get(response, params={"wait": "0"}, headers=auth)
    await get(response, params={"wait": "1"}, headers=auth)
    await get(response, params={"wait": "61"}, headers=auth)
    await get(response, params={"wait": "soon"}, headers=auth)
    await get(response, params={"stream": "true", "starting_after": "-1"}, headers=auth)
    await get(response, params={"unrelated": "1"}, headers=auth)
    await get(response, headers={**auth, "Last-Event-ID": "5"})
    await get(response, headers={**auth, "Last-Event-ID": "five"})
    await get(response, headers={"Authorization": f"Bearer {other}"})
    await get(response)
    await get("/v1/responses/resp_doesnotexist", headers=auth)
    await get(f"/v1/responses/{created['id']}", headers=auth)  # a native job: not found
    await get("/v1/responses/bad!id", headers=auth)
    await http.post(f"{response}/cancel", headers=auth)
    await get(response, headers=auth)  # terminal: no Retry-After
    await http.post(f"{job}/cancel", headers=auth)
    await get(job, headers=auth)  # terminal: no Retry-After
    return answers


# The Response reads of the script that FastAPI answers on every side (the unusual ones).
_UNUSUAL_RESPONSE_READS = 7


class OuterLayersSpy:
    """FastAPI's built middleware stack (server errors, telemetry, its body limit, then
    jobgate's), recording the requests that entered it from the top."""

    def __init__(self, stack: Any) -> None:
        self.app = stack  # the name each layer gives the next (HotFront walks them)
        self.paths: list[str] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.paths.append(f"{scope['method']} {scope['path']}")
        await self.app(scope, receive, send)


@pytest.fixture
def no_tracer_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    """HotFront steps aside while spans are recorded; a process has one global tracer provider
    and tests/services/test_observability.py installs one for the rest of the process. Unset it
    for this test, so that the outcome does not depend on which tests ran before in the same
    pytest-xdist worker."""
    try:
        from opentelemetry import trace
    except ImportError:  # no OpenTelemetry: nothing is ever recorded
        return
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", None)


@pytest.mark.asyncio
@pytest.mark.usefixtures("no_tracer_provider")
async def test_hot_routes_answer_as_the_fastapi_routes(runtime: Runtime) -> None:
    """Three sides: FastAPI's routes, the hot path inside FastAPI's stack, and the hot path
    behind http.front.HotFront (what the server runs), which skips FastAPI's outer layers."""
    answers: dict[str, list[dict[str, Any]]] = {}
    reached: dict[str, list[str]] = {}
    entered: dict[str, list[str]] = {}
    for side, hot in (("plain", False), ("hot", True), ("front", True)):
        app = create_app(runtime.app_context(), hot_routes=hot)
        spy = RouterSpy(app.router)
        app.router = spy  # type: ignore[assignment]
        outer = OuterLayersSpy(app.build_middleware_stack())
        app.middleware_stack = outer
        served: Any = HotFront(app) if side == "front" else app
        transport = httpx.ASGITransport(app=served)
        async with httpx.AsyncClient(transport=transport, base_url="http://jobgate.test") as http:
            answers[side] = await script(runtime, http, side)
        reached[side] = spy.paths
        entered[side] = outer.paths
    for side in ("hot", "front"):
        pairs = zip(answers["plain"], answers[side], strict=True)
        for index, (plain_answer, hot_answer) in enumerate(pairs):
            assert hot_answer == plain_answer, f"{side}: request #{index} differs"
    # The ordinary requests never reached FastAPI on the hot sides; the unusual ones did.
    for side in ("hot", "front"):
        hot_reached = reached[side]
        assert len(hot_reached) < len(reached["plain"]) // 2, hot_reached
        assert "GET /v1/jobs/bad!id" in hot_reached
        assert hot_reached.count("POST /v1/jobs") == 11, hot_reached
        response_reads = [p for p in hot_reached if p.startswith("GET /v1/responses/")]
        assert len(response_reads) == _UNUSUAL_RESPONSE_READS, response_reads
        # No model, a mistyped temperature, a JSON array, text/plain: FastAPI's to word.
        assert hot_reached.count("POST /v1/responses") == 4, hot_reached
    # Behind the front, the hot routes' requests never entered FastAPI's outer layers (the
    # others, e.g. a cancel, did); without it every request did.
    assert len(entered["hot"]) > len(answers["hot"]) // 2 > len(entered["front"])
    hot_shaped = re.compile(r"POST /v1/(jobs|responses)|GET /v1/(jobs|responses)/[^/]+")
    assert not [path for path in entered["front"] if hot_shaped.fullmatch(path)]
    assert any(path.endswith("/cancel") for path in entered["front"])


@pytest.mark.asyncio
async def test_openapi_still_declares_the_hot_routes(runtime: Runtime) -> None:
    hot = create_app(runtime.app_context()).openapi()
    plain = create_app(runtime.app_context(), hot_routes=False).openapi()
    assert hot == plain
    assert {"post", "get"} <= set(hot["paths"]["/v1/jobs"]) | set(hot["paths"]["/v1/jobs/{job_id}"])


@pytest.mark.asyncio
@pytest.mark.usefixtures("no_tracer_provider")
async def test_the_front_answers_plain_status_reads_past_jobgates_layers(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bodiless status read behind the front is answered without jobgate's middleware
    layers (http.front's direct path), with its request id and, for an unexpected error, the
    same 500 problem; a read with body framing, and every read while the access log is on,
    still takes the layers."""
    entered: list[str] = []
    layer_call = BodyLimitMiddleware.__call__

    async def spy(self: BodyLimitMiddleware, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            entered.append(f"{scope['method']} {scope['path']}")
        await layer_call(self, scope, receive, send)

    monkeypatch.setattr(BodyLimitMiddleware, "__call__", spy)
    key = (await runtime.tenants.create("acme-direct")).api_key
    auth = {"Authorization": f"Bearer {key}"}
    ctx = runtime.app_context()
    logged = dataclasses.replace(ctx, settings=ctx.settings.model_copy(update={"access_log": True}))
    for side, context in (("direct", ctx), ("logged", logged)):
        transport = httpx.ASGITransport(app=HotFront(create_app(context)))
        async with httpx.AsyncClient(transport=transport, base_url="http://jobgate.test") as http:
            submitted = await http.post("/v1/jobs", json=job_body(), headers=auth)
            assert submitted.status_code == 202, submitted.text
            path = f"/v1/jobs/{submitted.json()['id']}"
            entered.clear()
            read = await http.get(path, headers=auth)
            assert read.status_code == 200
            assert re.fullmatch(r"req_[0-9a-f]{24}", read.headers["x-request-id"])
            assert entered == ([] if side == "direct" else [f"GET {path}"])
            framed = await http.get(path, headers={**auth, "Content-Length": "0"})
            assert framed.status_code == 200 and "x-request-id" in framed.headers
            assert entered[-1:] == [f"GET {path}"]

    async def broken(**_: Any) -> Any:
        raise RuntimeError("the store broke")

    answers = []
    for context in (ctx, logged):
        monkeypatch.setattr(context.jobs, "status", broken)
        transport = httpx.ASGITransport(
            app=HotFront(create_app(context)), raise_app_exceptions=False
        )
        async with httpx.AsyncClient(transport=transport, base_url="http://jobgate.test") as http:
            failed = await http.get("/v1/jobs/job_doesnotmatter", headers=auth)
        assert failed.status_code == 500
        assert failed.json()["request_id"] == failed.headers["x-request-id"]
        answers.append(answer(failed))
    direct, layered = answers
    assert masked_request_ids(direct) == masked_request_ids(layered)


def masked_request_ids(value: Any) -> Any:
    return re.sub(r"req_[0-9a-f]{24}", "req_<id>", repr(value))
