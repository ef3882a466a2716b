"""OpenAI's Files API over real HTTP, on both backends (issue 17): uploads checked line by
line and stored in chunks; list, get, content, delete."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from jobgate.http import files_routes
from jobgate.services import files as files_service
from tests.api_server import Api


def line(custom_id: str, **overrides: Any) -> dict[str, Any]:
    body = {"model": "sim-echo", "messages": [{"role": "user", "content": custom_id}]}
    value: dict[str, Any] = {
        "custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body
    }  # fmt: skip
    value.update(overrides)
    return value


def jsonl(lines: list[Any]) -> bytes:
    return b"".join(orjson.dumps(value) + b"\n" for value in lines)


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def upload(api: Api, key: str, content: bytes, purpose: str = "batch") -> Any:
    return await api.http.post(
        "/v1/files",
        data={"purpose": purpose},
        files={"file": ("in.jsonl", content, "application/jsonl")},
        headers=auth(key),
    )


async def test_upload_list_get_content_delete(api: Api) -> None:
    key = await api.key("acme")
    content = jsonl([line(f"r{i}") for i in range(3)])
    response = await upload(api, key, content)
    assert response.status_code == 200, response.text
    made = response.json()
    assert made["object"] == "file" and made["purpose"] == "batch"
    assert made["bytes"] == len(content) and made["filename"] == "in.jsonl"
    listed = (await api.http.get("/v1/files", headers=auth(key))).json()
    assert [f["id"] for f in listed["data"]] == [made["id"]]
    got = await api.http.get(f"/v1/files/{made['id']}", headers=auth(key))
    assert got.json() == made
    body = await api.http.get(f"/v1/files/{made['id']}/content", headers=auth(key))
    assert body.content == content
    other = await api.key("other")
    assert (await api.http.get(f"/v1/files/{made['id']}", headers=auth(other))).status_code == 404
    deleted = await api.http.delete(f"/v1/files/{made['id']}", headers=auth(key))
    assert deleted.json() == {"id": made["id"], "object": "file", "deleted": True}
    assert (await api.http.get(f"/v1/files/{made['id']}", headers=auth(key))).status_code == 404


async def test_a_file_spanning_many_chunks_reads_back_whole(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files_service, "CHUNK_BYTES", 500)
    key = await api.key("acme")
    content = jsonl([line(f"r{i}") for i in range(60)])
    made = (await upload(api, key, content)).json()
    body = await api.http.get(f"/v1/files/{made['id']}/content", headers=auth(key))
    assert body.content == content
    chunks = await api.runtime.storage.file_chunks(file_id=made["id"], from_seq=0, limit=1000)
    assert len(chunks) > 10
    assert [c.first_line for c in chunks[:2]] == [1, 1 + chunks[0].line_count]
    assert sum(c.line_count for c in chunks) == 60


@pytest.mark.parametrize(
    ("lines", "code", "needle"),
    [
        ([line("a"), b"{not json"], "invalid_json_line", "line 2"),
        ([line("a"), [1, 2]], "invalid_json_line", "line 2"),
        ([line("a"), line("b"), line("a")], "duplicate_custom_id", "line 3"),
        ([line("a", method="GET")], "invalid_value", "line 1"),
        ([line("a"), line("b", url="/v1/embeddings")], "invalid_url", "line 2"),
        ([line("a", body="x")], "invalid_value", "line 1"),
        ([{**line("a"), "custom_id": 7}], "missing_required_parameter", "line 1"),
        ([line("a", extra=1)], "invalid_value", "line 1"),
        ([], "empty_file", "no lines"),
    ],
)
async def test_malformed_files_are_refused_line_precisely(
    api: Api, lines: list[Any], code: str, needle: str
) -> None:
    key = await api.key("acme")
    content = b"".join(
        (raw if isinstance(raw, bytes) else orjson.dumps(raw)) + b"\n" for raw in lines
    )
    response = await upload(api, key, content)
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["error"]["code"] == code and needle in problem["error"]["message"]
    assert problem["error"]["type"] == "invalid_request_error"
    listed = (await api.http.get("/v1/files", headers=auth(key))).json()
    assert listed["data"] == []  # nothing was kept


async def test_wrong_purpose_and_missing_file_are_refused(api: Api) -> None:
    key = await api.key("acme")
    response = await upload(api, key, jsonl([line("a")]), purpose="fine-tune")
    assert response.status_code == 400 and response.json()["error"]["param"] == "purpose"
    no_file = await api.http.post("/v1/files", data={"purpose": "batch"}, headers=auth(key))
    assert no_file.status_code == 400
    json_body = await api.http.post("/v1/files", json={"purpose": "batch"}, headers=auth(key))
    assert json_body.status_code == 400
    assert (await api.http.get("/v1/files", headers=auth(key))).json()["data"] == []


async def test_size_and_line_limits(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    key = await api.key("acme")
    settings = api.runtime.settings.model_copy(
        update={"batch_max_lines": 3, "files_max_bytes": 2000}
    )

    def limited(ctx: Any) -> files_service.FileService:
        return files_service.FileService(storage=ctx.storage, settings=settings, ids=ctx.jobs.ids)

    monkeypatch.setattr(files_routes, "files", limited)
    lines = await upload(api, key, jsonl([line(f"r{i}") for i in range(4)]))
    assert lines.status_code == 400 and lines.json()["code"] == "too_many_lines"
    big = await upload(api, key, jsonl([line("x" * 3000)]))
    assert big.status_code == 413 and big.json()["code"] == "payload_too_large"
    assert (await api.http.get("/v1/files", headers=auth(key))).json()["data"] == []
    assert (await upload(api, key, jsonl([line("ok")]))).status_code == 200


async def test_unknown_file_is_404_problem(api: Api) -> None:
    key = await api.key("acme")
    for method, path in (
        ("GET", "/v1/files/file_nope"),
        ("GET", "/v1/files/file_nope/content"),
        ("DELETE", "/v1/files/file_nope"),
    ):
        response = await api.http.request(method, path, headers=auth(key))
        assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
