"""The upload size limit, both where it bites: the edge cuts off a body past the route's limit
(files_max_bytes plus the form's slack) and the line reader refuses a file past
files_max_bytes; neither keeps anything (both backends)."""

from __future__ import annotations

import orjson
import pytest

from jobgate.config import Settings
from tests.api_server import Api
from tests.http.test_jobs_api import raw_request


@pytest.fixture
def settings() -> Settings:
    return Settings(database_url="sqlite:///unused.db", shutdown_grace_s=0, files_max_bytes=2000)


def body(size: int) -> bytes:
    line = {"custom_id": "a", "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": "sim-echo", "pad": "x" * size}}  # fmt: skip
    return orjson.dumps(line) + b"\n"


async def test_past_the_limit_is_413_wherever_it_is_caught(api: Api) -> None:
    key = await api.key("acme")
    headers = {"Authorization": f"Bearer {key}"}
    # Within the route's limit, past files_max_bytes: the line reader refuses it.
    response = await api.http.post(
        "/v1/files",
        data={"purpose": "batch"},
        files={"file": ("in.jsonl", body(3000), "application/jsonl")},
        headers=headers,
    )
    assert response.status_code == 413 and response.json()["code"] == "payload_too_large"
    # Declared past the route's limit: answered from the headers, no byte of the body read.
    head = (
        f"POST /v1/files HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {key}\r\n"
        "Content-Type: multipart/form-data; boundary=b\r\nContent-Length: 200000\r\n\r\n"
    ).encode()
    declared = await raw_request(api, head, [])
    assert declared.startswith(b"HTTP/1.1 413") and b"payload_too_large" in declared
    assert (await api.http.get("/v1/files", headers=headers)).json()["data"] == []
    ok = await api.http.post(
        "/v1/files",
        data={"purpose": "batch"},
        files={"file": ("in.jsonl", body(100), "application/jsonl")},
        headers=headers,
    )
    assert ok.status_code == 200
