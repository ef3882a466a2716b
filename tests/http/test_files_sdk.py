"""The files routes as the official `openai` SDK uses them (strict mode): `files.list`
honours `order` (newest first by default, as OpenAI's) with `after` paging either way, and
`files.content` answers the upload byte for byte."""

from __future__ import annotations

from collections.abc import AsyncIterator

import openai
import pytest

from tests.api_server import Api

pytestmark = pytest.mark.asyncio
LINE = b'{"custom_id": "%d", "method": "POST", "url": "/v1/chat/completions", "body": {}}\n'


@pytest.fixture
async def client(api: Api) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(
        base_url=f"{api.url}/v1",
        api_key=await api.key("acme"),
        max_retries=0,
        _strict_response_validation=True,
    ) as sdk:
        yield sdk


async def test_files_list_honours_order_and_pages_either_way(client: openai.AsyncOpenAI) -> None:
    ids = []
    for n in range(3):
        created = await client.files.create(file=(f"f{n}.jsonl", LINE % n), purpose="batch")
        ids.append(created.id)
    newest_first = [f.id async for f in client.files.list()]
    assert newest_first == ids[::-1]
    assert [f.id async for f in client.files.list(order="desc")] == ids[::-1]
    assert [f.id async for f in client.files.list(order="asc")] == ids
    page = await client.files.list(order="asc", limit=2)
    assert [f.id for f in page.data] == ids[:2] and page.has_more
    rest = await client.files.list(order="asc", after=ids[1])
    assert [f.id for f in rest.data] == ids[2:] and not rest.has_more
    back = await client.files.list(order="desc", after=ids[1])
    assert [f.id for f in back.data] == ids[:1]


async def test_an_order_that_is_neither_asc_nor_desc_is_refused(
    client: openai.AsyncOpenAI,
) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        await client.files.list(extra_query={"order": "sideways"})
    assert refused.value.param == "query.order"


async def test_file_content_is_the_upload_byte_for_byte(client: openai.AsyncOpenAI) -> None:
    upload = b'{"custom_id": "\xc3\xa9", "method": "POST", "url": "/v1/chat/completions",\t' + (
        b'"body": {"model": "sim-echo"}}\r\n\r\n{"custom_id": "b", "method": "POST", '
        b'"url": "/v1/chat/completions", "body": {}}'  # CRLF, a blank line, no final newline
    )
    created = await client.files.create(file=("raw.jsonl", upload), purpose="batch")
    assert created.bytes == len(upload)
    assert (await client.files.content(created.id)).read() == upload
