"""The published OpenAPI document: bearer security, an example for every request and response,
problem+json errors under their real content type, and error lists that match what the server
answers. The UI assets come from jobgate itself (tests/e2e/test_api_docs_browser.py renders
them)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from jobgate.http import openapi_doc
from jobgate.http.schemas.native import JobOut, SubmitJobRequest
from jobgate.http.schemas.responses import CreateResponseRequest
from jobgate.http.schemas.webhooks import CreateEndpointRequest
from tests.api_server import Api

SQLITE = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
METHODS = ("get", "post", "put", "patch", "delete")


def operations(spec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method.upper(), path, operation)
        for path, item in spec["paths"].items()
        for method, operation in item.items()
        if method in METHODS
    ]


@SQLITE
async def test_every_operation_has_security_examples_and_problem_errors(
    backend: str, api: Api
) -> None:
    spec = (await api.http.get("/openapi.json")).json()
    schemes = spec["components"]["securitySchemes"]
    assert schemes["tenantKey"] == {**schemes["tenantKey"], "type": "http", "scheme": "bearer"}
    assert "HTTPValidationError" not in spec["components"]["schemas"]
    found = operations(spec)
    assert len(found) >= 20
    for method, path, operation in found:
        where = f"{method} {path}"
        if path.startswith("/v1/pauses"):  # operator routes
            assert operation["security"] == [{"operatorKey": []}], where
        elif path.startswith("/v1/") and "provider_webhooks" not in path:
            assert operation["security"] == [{"tenantKey": []}], where
        body = operation.get("requestBody", {}).get("content", {})
        for media_type, entry in body.items():
            assert "example" in entry, f"{where} request {media_type}"
        for status, response in operation["responses"].items():
            content = response.get("content", {})
            if status.startswith("2"):
                assert content, f"{where} {status} has no content"
                json_like = [e for m, e in content.items() if "json" in m or m == "text/plain"]
                assert all("example" in e for e in json_like), f"{where} {status}"
            elif int(status) >= 400 and path != "/readyz":
                assert list(content) == ["application/problem+json"], f"{where} {status}"
                problem = content["application/problem+json"]
                assert problem["schema"] == {"$ref": "#/components/schemas/ProblemOut"}
                assert problem["example"]["status"] == int(status)


@SQLITE
async def test_error_lists_differ_by_operation(backend: str, api: Api) -> None:
    spec = (await api.http.get("/openapi.json")).json()

    def errors_of(method: str, path: str) -> set[int]:
        responses = spec["paths"][path][method]["responses"]
        return {int(s) for s in responses if int(s) >= 400}

    assert errors_of("post", "/v1/jobs") == {400, 401, 403, 409, 413, 422, 429, 503}
    assert errors_of("get", "/v1/jobs/{job_id}") == {400, 401, 404, 503}
    assert errors_of("post", "/v1/jobs/{job_id}/cancel") == {400, 401, 404, 503}
    assert errors_of("get", "/v1/webhook_secret") == {401, 503}
    assert errors_of("get", "/v1/jobs") == {400, 401, 404, 503}  # an unknown `after` cursor
    assert 422 in errors_of("post", "/v1/webhook_endpoints")
    assert errors_of("get", "/healthz") == set()


def test_the_written_examples_are_valid_requests_and_objects() -> None:
    examples = openapi_doc.EXAMPLES
    SubmitJobRequest.model_validate(examples["SubmitJobRequest"])
    JobOut.model_validate(examples["JobOut"])
    CreateEndpointRequest.model_validate(examples["CreateEndpointRequest"])
    CreateResponseRequest.model_validate(examples["CreateResponseRequest"])


@SQLITE
async def test_what_the_server_answers_is_in_the_documented_list(backend: str, api: Api) -> None:
    """Observed errors are a subset of the documented ones: no key (401), an unknown id (404),
    a body that is not JSON (400)."""
    spec = (await api.http.get("/openapi.json")).json()
    key = await api.key("acme")
    auth = {"Authorization": f"Bearer {key}"}
    checked = 0
    for method, path, operation in operations(spec):
        documented = {int(s) for s in operation["responses"] if int(s) >= 400}
        url = re.sub(r"\{[^}]+\}", "nosuch_01jd3m5vq8x2k7c9hzt4w6r0pa", path)
        if path.startswith("/v1/provider_webhooks"):
            url = path.replace("{provider}", "nosuch")
        tries: list[tuple[dict[str, str], bytes | None]] = []
        if operation["security"] and path.startswith("/v1/"):
            tries.append(({}, None))
        if "{" in path:
            tries.append((auth, b"{}" if "requestBody" in operation else None))
        if "requestBody" in operation:
            tries.append(({**auth, "Content-Type": "application/json"}, b"{not json"))
        for headers, content in tries:
            answer = await api.http.request(method, url, headers=headers, content=content)
            if answer.status_code >= 400:
                assert answer.status_code in documented, (method, path, answer.text[:200])
                assert answer.headers["content-type"] == "application/problem+json"
                checked += 1
    assert checked >= 40


@SQLITE
async def test_the_docs_pages_load_their_assets_from_jobgate(backend: str, api: Api) -> None:
    for page in ("/docs", "/redoc"):
        html = (await api.http.get(page)).text
        sources = re.findall(r'(?:src|href)="([^"]+)"', html)
        assert sources and all(s.startswith("/docs/assets/") for s in sources), sources
        assert "cdn" not in html and "googleapis" not in html
        for source in sources:
            asset = await api.http.get(source)
            assert asset.status_code == 200 and len(asset.content) > 1000, source
    css = await api.http.get("/docs/assets/swagger-ui.css")
    assert css.headers["content-type"].startswith("text/css")
    assert (await api.http.get("/docs/assets/../../etc/passwd")).status_code == 404
    assert (await api.http.get("/docs/assets/core.py")).status_code == 404


def test_an_error_a_route_describes_itself_is_kept() -> None:
    generated: dict[str, Any] = {
        "openapi": "3.1.0",
        "paths": {
            "/v1/things": {
                "post": {
                    "requestBody": {"content": {"application/json": {"schema": {}}}},
                    "responses": {
                        "200": {"description": "ok", "content": {"application/json": {}}},
                        "404": {"description": "Not Found"},  # a blanket placeholder
                        "410": {"description": "the thing is gone for good"},
                    },
                }
            }
        },
    }
    completed = openapi_doc.complete(generated)
    responses = completed["paths"]["/v1/things"]["post"]["responses"]
    assert set(responses) == {"200", "400", "401", "410", "413", "503"}
    assert responses["410"]["description"] == "the thing is gone for good"
    assert responses["410"]["content"]["application/problem+json"]["example"]["status"] == 410
    assert generated["paths"]["/v1/things"]["post"]["responses"]["404"]  # the input is untouched
