"""The hot routes' dispatch (http.routes.hot) and the server's front (http.front): their
requests reach the routes' one handler (http.routes.asgi) without FastAPI's router or outer
layers, whatever they carry; the declarations keep them in /openapi.json. What the routes
answer, case by case, is tests/http/test_route_answers.py."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import httpx
import pytest

from jobgate.http.app import create_app
from jobgate.http.front import HotFront
from jobgate.http.middleware.body_limit import BodyLimitMiddleware
from jobgate.process.runtime import Runtime
from tests.http.test_route_answers import answer, job_body


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
async def test_hot_routes_never_reach_fastapis_router(runtime: Runtime) -> None:
    """Valid or not, a hot route's request is answered by its handler, behind the front past
    FastAPI's outer layers too; other requests (a cancel, an empty id) take the router."""
    key = (await runtime.tenants.create("acme-dispatch")).api_key
    auth = {"Authorization": f"Bearer {key}"}
    app = create_app(runtime.app_context())
    spy = RouterSpy(app.router)
    app.router = spy  # type: ignore[assignment]
    outer = OuterLayersSpy(app.build_middleware_stack())
    app.middleware_stack = outer
    transport = httpx.ASGITransport(app=HotFront(app))
    async with httpx.AsyncClient(transport=transport, base_url="http://jobgate.test") as http:
        job = (await http.post("/v1/jobs", json=job_body(), headers=auth)).json()
        hot = [
            await http.post("/v1/jobs", content=b"[1]", headers=auth),
            await http.post(
                "/v1/jobs", content=b"{}", headers={**auth, "Content-Type": "text/plain"}
            ),
            await http.post("/v1/jobs", json={"endpoint": 3}),
            await http.post("/v1/responses", json={"input": "no model"}, headers=auth),
            await http.get(f"/v1/jobs/{job['id']}", headers=auth),
            await http.get(f"/v1/jobs/{job['id']}", params={"wait": "soon"}, headers=auth),
            await http.get("/v1/jobs/bad!id", headers=auth),
            await http.get(f"/v1/jobs/{job['id']}", params={"token": "jgt_x.y"}),
            await http.get("/v1/responses/resp_x", params={"stream": "maybe"}, headers=auth),
            await http.get("/v1/responses/resp_x", headers={**auth, "Last-Event-ID": "x"}),
        ]
        assert [r.status_code for r in hot] == [400, 400, 401, 400, 200, 400, 400, 401, 400, 400]
        assert spy.paths == [] and outer.paths == []
        cancelled = await http.post(f"/v1/jobs/{job['id']}/cancel", headers=auth)
        assert cancelled.status_code == 200
        listed = await http.get("/v1/jobs/", headers=auth, follow_redirects=False)
        assert listed.status_code == 307
    cancel, empty = f"POST /v1/jobs/{job['id']}/cancel", "GET /v1/jobs/"
    assert spy.paths == [cancel, empty]
    assert outer.paths == [cancel]  # an empty id is hot-shaped: the front sends it past them


@pytest.mark.asyncio
async def test_openapi_declares_the_hot_routes(runtime: Runtime) -> None:
    paths = create_app(runtime.app_context()).openapi()["paths"]
    submit = paths["/v1/jobs"]["post"]
    assert submit["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/SubmitJobRequest"
    }
    assert {p["name"] for p in submit["parameters"]} == {"Idempotency-Key", "Prefer"}
    read = paths["/v1/jobs/{job_id}"]["get"]
    assert {p["name"] for p in read["parameters"]} == {"job_id", "token", "wait"}
    create = paths["/v1/responses"]["post"]
    assert "CreateResponseRequest" in str(create["requestBody"])
    retrieve = paths["/v1/responses/{response_id}"]["get"]
    names = {p["name"] for p in retrieve["parameters"]}
    assert names == {"response_id", "stream", "starting_after", "wait", "Last-Event-ID"}


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
        answers.append(answer("500", failed))
    direct, layered = answers
    assert masked_request_ids(direct) == masked_request_ids(layered)


def masked_request_ids(value: Any) -> Any:
    return re.sub(r"req_[0-9a-f]{24}", "req_<id>", repr(value))
