"""OpenAI's Files API over real HTTP, on both backends: uploads checked line by
line and stored in chunks; list, get, content, delete."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from jobgate.http.routes import files as files_routes
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
    ("lines", "code", "line_number"),
    [
        ([line("a"), b"{not json"], "invalid_json_line", 2),
        ([line("a"), [1, 2]], "invalid_json_line", 2),
        ([line("a"), line("b"), line("a")], "duplicate_custom_id", 3),
        ([line("a", method="GET")], "invalid_value", 1),
        ([line("a"), line("b", url="/v1/embeddings")], "url_mismatch", 2),
        ([line("a"), line("b", url="/v1/nowhere")], "invalid_url", 2),
        ([line("a", body="x")], "invalid_value", 1),
        ([{**line("a"), "custom_id": 7}], "missing_required_parameter", 1),
        ([line("a", extra=1)], "invalid_value", 1),
        ([], "empty_file", None),
    ],
)
async def test_malformed_lines_are_taken_and_fail_their_batch_line_precisely(
    api: Api, lines: list[Any], code: str, line_number: int | None
) -> None:
    """files.create takes any well-formed upload (as OpenAI's does); the batch made of it is
    validated, and fails with OpenAI's error naming the line."""
    key = await api.key("acme")
    content = b"".join(
        (raw if isinstance(raw, bytes) else orjson.dumps(raw)) + b"\n" for raw in lines
    )
    response = await upload(api, key, content)
    assert response.status_code == 200, response.text
    created = await api.http.post(
        "/v1/batches",
        json={"input_file_id": response.json()["id"], "endpoint": "/v1/chat/completions",
              "completion_window": "24h"},
        headers=auth(key),
    )  # fmt: skip
    await api.runtime.batch_runner().batches_once()
    batch = (await api.http.get(f"/v1/batches/{created.json()['id']}", headers=auth(key))).json()
    assert batch["status"] == "failed"
    (error,) = batch["errors"]["data"]
    assert (error["code"], error["line"]) == (code, line_number)
    assert error["message"]


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
        update={"batch_max_lines": 3, "files_max_bytes": 2000, "max_body_bytes": 300}
    )

    def limited(ctx: Any) -> files_service.FileService:
        return files_service.FileService(storage=ctx.storage, settings=settings, ids=ctx.jobs.ids)

    monkeypatch.setattr(files_routes, "files", limited)
    big = await upload(api, key, jsonl([line("x" * 3000)]))
    assert big.status_code == 413 and big.json()["code"] == "payload_too_large"
    # One line longer than a request may be (max_body_bytes), the file within its limit.
    long_line = await upload(api, key, jsonl([line("a"), line("b" * 400)]))
    assert long_line.status_code == 413, long_line.text
    assert "line 2" in long_line.json()["error"]["message"]
    assert (await api.http.get("/v1/files", headers=auth(key))).json()["data"] == []
    assert (await upload(api, key, jsonl([line("ok")]))).status_code == 200
    # More requests than a batch takes: the upload is kept, the batch fails its validation.
    many = await upload(api, key, jsonl([line(f"r{i}") for i in range(4)]))
    assert many.status_code == 200
    monkeypatch.setattr(api.runtime.jobs, "settings", settings)
    created = await api.http.post(
        "/v1/batches",
        json={"input_file_id": many.json()["id"], "endpoint": "/v1/chat/completions",
              "completion_window": "24h"},
        headers=auth(key),
    )  # fmt: skip
    await api.runtime.batch_runner().batches_once()
    batch = (await api.http.get(f"/v1/batches/{created.json()['id']}", headers=auth(key))).json()
    assert batch["status"] == "failed"
    assert [e["code"] for e in batch["errors"]["data"]] == ["too_many_lines"]


async def test_a_tenant_keeps_a_bounded_number_of_files_and_bytes(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = await api.key("acme")
    other = await api.key("other")
    settings = api.runtime.settings.model_copy(
        update={"files_max_per_tenant": 2, "files_max_bytes_per_tenant": 1000}
    )

    def limited(ctx: Any) -> files_service.FileService:
        return files_service.FileService(storage=ctx.storage, settings=settings, ids=ctx.jobs.ids)

    monkeypatch.setattr(files_routes, "files", limited)
    small = jsonl([line("a")])
    assert (await upload(api, key, small)).status_code == 200
    too_big = await upload(api, key, jsonl([line(f"r{i}") for i in range(8)]))  # > 1000 bytes
    assert too_big.status_code == 403, too_big.text
    assert too_big.json()["error"]["code"] == "limit_exceeded"
    assert "files_max_bytes_per_tenant" in too_big.json()["error"]["message"]
    second = await upload(api, key, small)
    assert second.status_code == 200
    third = await upload(api, key, small)
    assert third.status_code == 403 and "files_max_per_tenant" in third.text
    assert len((await api.http.get("/v1/files", headers=auth(key))).json()["data"]) == 2
    assert (await upload(api, other, small)).status_code == 200  # each tenant its own room
    await api.http.delete(f"/v1/files/{second.json()['id']}", headers=auth(key))
    assert (await upload(api, key, small)).status_code == 200  # room again


async def test_unknown_file_is_404_problem(api: Api) -> None:
    key = await api.key("acme")
    for method, path in (
        ("GET", "/v1/files/file_nope"),
        ("GET", "/v1/files/file_nope/content"),
        ("DELETE", "/v1/files/file_nope"),
    ):
        response = await api.http.request(method, path, headers=auth(key))
        assert response.status_code == 404 and response.json()["code"] == "not_found"
        assert response.json()["error"]["code"] is None  # as OpenAI answers it
