"""Every id and cursor a route takes is checked at the edge, on both stores: a NUL (which
PostgreSQL's text cannot hold), a slash-free oddity or an over-long id answers a 400 problem,
never a 5xx naming the database. The routes are read from the application itself, so a route
added later is covered without a change here."""

from __future__ import annotations

import re

import httpx
import pytest

from jobgate.http.app import create_app
from tests.api_server import Api

BAD_IDS = ["a%00b", "%00", "x" * 256, "a%20b", "%C3%A9"]
# Query parameters that name an object or a cursor, per list route.
CURSORS = [
    ("/v1/jobs", "after"),
    ("/v1/files", "after"),
    ("/v1/files", "purpose"),
    ("/v1/batches", "after"),
    ("/v1/schedules", "after"),
    ("/v1/webhook_endpoints", "after"),
]


def _id_routes(api: Api) -> list[tuple[str, str]]:
    """(method, path template) of every tenant route under /v1 with a path parameter."""
    paths = create_app(api.runtime.app_context()).openapi()["paths"]
    return [
        (method.upper(), path)
        for path, operations in paths.items()
        if "{" in path and path.startswith("/v1/") and not path.startswith("/v1/provider_")
        for method in operations
    ]


def _problem(response: httpx.Response) -> None:
    assert response.status_code == 400, (response.request.url, response.text[:300])
    assert response.headers["content-type"].startswith("application/problem+json")
    assert "Character" not in response.text  # never the database's own error


async def test_every_id_in_a_path_is_checked_before_storage(api: Api) -> None:
    keys = [await api.key("acme"), await api.runtime.operators.create("ops")]
    routes = _id_routes(api)
    assert len(routes) > 20  # jobs, responses, files, batches, schedules, webhook endpoints
    for method, template in routes:
        for bad in BAD_IDS:
            path = re.sub(r"\{[a-z_]+\}", bad, template)
            for key in keys:  # a tenant's key, then an operator's for the operator routes
                answer = await api.http.request(
                    method, path, headers={"Authorization": f"Bearer {key}"}, json={}
                )
                if answer.status_code != 403:
                    break
            _problem(answer)


@pytest.mark.parametrize(("path", "param"), CURSORS)
async def test_every_cursor_is_checked_before_storage(api: Api, path: str, param: str) -> None:
    key = await api.key("acme")
    for bad in BAD_IDS:
        answer = await api.http.get(
            f"{path}?{param}={bad}", headers={"Authorization": f"Bearer {key}"}
        )
        _problem(answer)


async def test_a_nul_in_an_uploaded_filename_is_refused(api: Api) -> None:
    key = await api.key("acme")
    form = (  # written by hand: an HTML5 form encoder would escape the NUL as %00
        b'--b\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
        b'--b\r\nContent-Disposition: form-data; name="file"; filename="a\x00b.jsonl"\r\n'
        b"Content-Type: application/jsonl\r\n\r\n"
        b'{"custom_id": "1", "method": "POST", "url": "/v1/chat/completions", "body": {}}\n'
        b"\r\n--b--\r\n"
    )
    auth = {"Authorization": f"Bearer {key}"}
    answer = await api.http.post(
        "/v1/files",
        headers={**auth, "Content-Type": "multipart/form-data; boundary=b"},
        content=form,
    )
    _problem(answer)
    assert (await api.http.get("/v1/files", headers=auth)).json()["data"] == []
