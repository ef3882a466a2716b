"""The OpenAI-compatible surface (/v1/responses, /v1/files, /v1/batches) answers a bad key and
a missing object as OpenAI does, so that clients reading `error.type` and `error.code` (the
SDK's exception's `type` and `code`) see what they would from OpenAI: 401
`invalid_request_error` / `invalid_api_key`, 404 `invalid_request_error` with a null code. The
native API keeps its own types."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import openai
import pytest

from tests.api_server import Api

pytestmark = pytest.mark.asyncio


@pytest.fixture
async def client(api: Api) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(
        base_url=f"{api.url}/v1",
        api_key=await api.key("acme"),
        max_retries=0,
        _strict_response_validation=True,
    ) as sdk:
        yield sdk


CALLS: dict[str, Callable[[openai.AsyncOpenAI], Awaitable[Any]]] = {
    "responses.retrieve": lambda c: c.responses.retrieve("resp_nope"),
    "responses.retrieve_stream": lambda c: c.responses.retrieve("resp_nope", stream=True),
    "responses.cancel": lambda c: c.responses.cancel("resp_nope"),
    "responses.delete": lambda c: c.responses.delete("resp_nope"),
    "files.retrieve": lambda c: c.files.retrieve("file-nope"),
    "files.content": lambda c: c.files.content("file-nope"),
    "files.delete": lambda c: c.files.delete("file-nope"),
    "batches.retrieve": lambda c: c.batches.retrieve("batch_nope"),
    "batches.cancel": lambda c: c.batches.cancel("batch_nope"),
}


@pytest.mark.parametrize("call", sorted(CALLS))
async def test_a_missing_object_is_openais_404(client: openai.AsyncOpenAI, call: str) -> None:
    with pytest.raises(openai.NotFoundError) as missing:
        await CALLS[call](client)
    assert missing.value.type == "invalid_request_error", missing.value.body
    assert missing.value.code is None


@pytest.mark.parametrize(
    "call", ["responses.retrieve", "files.retrieve", "batches.retrieve", "responses.create"]
)
async def test_a_bad_key_is_openais_401(api: Api, call: str) -> None:
    async with openai.AsyncOpenAI(
        base_url=f"{api.url}/v1", api_key="sk-wrong", max_retries=0
    ) as stranger:
        with pytest.raises(openai.AuthenticationError) as refused:
            if call == "responses.create":
                await stranger.responses.create(model="sim-echo", input="x", background=True)
            else:
                await CALLS[call](stranger)
    assert refused.value.type == "invalid_request_error", refused.value.body
    assert refused.value.code == "invalid_api_key"


async def test_an_unknown_route_of_the_surface_has_a_null_code(api: Api) -> None:
    answer = await api.http.get(
        "/v1/responses/resp_1/nothing", headers={"Authorization": f"Bearer {await api.key('a')}"}
    )
    assert answer.status_code == 404
    assert answer.json()["error"]["type"] == "invalid_request_error"
    assert answer.json()["error"]["code"] is None


async def test_the_native_api_keeps_its_own_types(api: Api) -> None:
    headers = {"Authorization": f"Bearer {await api.key('acme')}"}
    missing = await api.http.get("/v1/jobs/job_nope", headers=headers)
    assert missing.status_code == 404
    assert missing.json()["error"] == {
        "message": "no job with id 'job_nope'",
        "type": "not_found_error",
        "code": "not_found",
        "param": None,
    }
    refused = await api.http.get("/v1/jobs/job_nope", headers={"Authorization": "Bearer x"})
    assert refused.status_code == 401
    assert refused.json()["error"]["type"] == "authentication_error"
