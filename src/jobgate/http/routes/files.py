"""OpenAI's Files API for batch inputs and outputs: upload (streamed), list, get, content,
delete."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Query, Request
from starlette.responses import Response, StreamingResponse

from jobgate import errors
from jobgate.config import Settings
from jobgate.http import multipart_stream
from jobgate.http.context import AppContext, Ctx, CurrentTenant
from jobgate.http.object_ids import FileId, FilePurpose
from jobgate.http.schemas.native import ProblemOut
from jobgate.services.files import FileService, file_view

router = APIRouter(prefix="/v1", tags=["files"])

_PROBLEMS: dict[int | str, dict[str, Any]] = {
    status: {"model": ProblemOut, "content": {"application/problem+json": {}}}
    for status in (400, 401, 404, 413, 503)
}
_MULTIPART_SLACK = 64 * 1024  # the form's boundaries and headers around the file


def body_limits(settings: Settings) -> dict[str, int]:
    """The request size limit of the upload route (the file itself is bounded exactly)."""
    return {"/v1/files": settings.files_max_bytes + _MULTIPART_SLACK}


def files(ctx: AppContext) -> FileService:
    return FileService(storage=ctx.storage, settings=ctx.settings, ids=ctx.jobs.ids)


def _json(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")


_UPLOAD_SCHEMA = {
    "type": "object",
    "required": ["file", "purpose"],
    "properties": {
        "file": {"type": "string", "format": "binary", "description": "JSONL, a request a line"},
        "purpose": {"type": "string", "enum": ["batch"]},
    },
}


@router.post(
    "/files",
    responses=_PROBLEMS,
    summary="Upload a batch input file (JSONL)",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"multipart/form-data": {"schema": _UPLOAD_SCHEMA}},
        }
    },
)
async def upload_file(request: Request, ctx: Ctx, tenant: CurrentTenant) -> Response:
    upload = multipart_stream.Upload()
    data = multipart_stream.stream_upload(
        request.stream(), content_type=request.headers.get("content-type", ""), upload=upload
    )
    first = await anext(data, None)  # the file part's headers (and the fields before it) are in
    if not upload.file_seen:
        raise errors.InvalidRequest("the form has no `file` part", param="file")
    record = await files(ctx).upload(
        tenant_id=tenant.id,
        purpose=lambda: upload.fields.get("purpose"),
        filename=upload.filename or "",
        data=_prepend(first, data),
    )
    return _json(file_view(record))


async def _prepend(first: bytes | None, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    if first is not None:
        yield first
    async for piece in rest:
        yield piece


@router.get("/files", responses=_PROBLEMS, summary="List files")
async def list_files(
    ctx: Ctx,
    tenant: CurrentTenant,
    purpose: FilePurpose | None = None,
    after: Annotated[
        FileId | None, Query(description="Id of the last file of the previous page")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 10_000,
    order: Annotated[
        Literal["asc", "desc"], Query(description="By creation time: `desc` (newest first)")
    ] = "desc",
) -> Response:
    found, more = await files(ctx).list(
        tenant_id=tenant.id, purpose=purpose, after=after, limit=limit, oldest_first=order == "asc"
    )
    data = [file_view(record) for record in found]
    return _json(
        {
            "object": "list",
            "data": data,
            "has_more": more,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
        }
    )


@router.get("/files/{file_id}", responses=_PROBLEMS, summary="Get a file")
async def get_file(file_id: FileId, ctx: Ctx, tenant: CurrentTenant) -> Response:
    return _json(file_view(await files(ctx).get(tenant_id=tenant.id, file_id=file_id)))


@router.get("/files/{file_id}/content", responses=_PROBLEMS, summary="A file's content")
async def file_content(file_id: FileId, ctx: Ctx, tenant: CurrentTenant) -> StreamingResponse:
    chunks = await files(ctx).content(tenant_id=tenant.id, file_id=file_id)
    return StreamingResponse(chunks, media_type="application/jsonl")


@router.delete("/files/{file_id}", responses=_PROBLEMS, summary="Delete a file")
async def delete_file(file_id: FileId, ctx: Ctx, tenant: CurrentTenant) -> Response:
    await files(ctx).delete(tenant_id=tenant.id, file_id=file_id)
    return _json({"id": file_id, "object": "file", "deleted": True})
