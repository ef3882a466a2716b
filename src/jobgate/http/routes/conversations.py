"""OpenAI-compatible /v1/conversations: create, retrieve, delete, and list or add items. A
response created with `conversation` continues it (services.conversations), on any provider.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from starlette.responses import Response

from jobgate.clock import to_unix
from jobgate.domain import conversation_items
from jobgate.http.context import Ctx, CurrentTenant
from jobgate.http.json_response import json_response
from jobgate.http.object_ids import ConversationId, ItemId
from jobgate.http.schemas.conversations import (
    AddItemsRequest,
    ConversationOut,
    CreateConversationRequest,
    DeletedConversationOut,
    ItemListOut,
)
from jobgate.http.schemas.native import ProblemOut
from jobgate.http.strict_json import StrictJsonRoute
from jobgate.services.conversations import ConversationService
from jobgate.storage.records import Conversation, ConversationItem

router = APIRouter(prefix="/v1", tags=["conversations"], route_class=StrictJsonRoute)

_PROBLEMS: dict[int | str, dict[str, Any]] = {
    status: {"model": ProblemOut, "content": {"application/problem+json": {}}}
    for status in (400, 401, 404, 413, 422, 503)
}


def service(ctx: Ctx) -> ConversationService:
    return ConversationService(storage=ctx.jobs.storage, jobs=ctx.jobs, ids=ctx.jobs.ids)


Service = Annotated[ConversationService, Depends(service)]


def _conversation(conversation: Conversation) -> dict[str, Any]:
    return {
        "id": conversation.id,
        "object": "conversation",
        "created_at": to_unix(conversation.created_at) or 0,
        "metadata": conversation.metadata,
    }


def _items(items: list[ConversationItem], *, has_more: bool) -> dict[str, Any]:
    return {
        "object": "list",
        "data": [item.item for item in items],
        "first_id": items[0].id if items else None,
        "last_id": items[-1].id if items else None,
        "has_more": has_more,
    }


@router.post(
    "/conversations",
    response_model=ConversationOut,
    responses=_PROBLEMS,
    summary="Create a conversation",
)
async def create_conversation(
    payload: CreateConversationRequest, svc: Service, tenant: CurrentTenant
) -> Response:
    items = conversation_items.check(payload.items or [])
    conversation = await svc.create(
        tenant_id=tenant.id, metadata=dict(payload.metadata or {}), items=items
    )
    return json_response(_conversation(conversation))


@router.get(
    "/conversations/{conversation_id}",
    response_model=ConversationOut,
    responses=_PROBLEMS,
    summary="Retrieve a conversation",
)
async def get_conversation(
    conversation_id: ConversationId, svc: Service, tenant: CurrentTenant
) -> Response:
    conversation = await svc.get(tenant_id=tenant.id, conversation_id=conversation_id)
    return json_response(_conversation(conversation))


@router.delete(
    "/conversations/{conversation_id}",
    response_model=DeletedConversationOut,
    responses=_PROBLEMS,
    summary="Delete a conversation",
    description="Deletes the conversation and its items; the responses created on it stay.",
)
async def delete_conversation(
    conversation_id: ConversationId, svc: Service, tenant: CurrentTenant
) -> Response:
    await svc.delete(tenant_id=tenant.id, conversation_id=conversation_id)
    return json_response({"id": conversation_id, "object": "conversation.deleted", "deleted": True})


@router.get(
    "/conversations/{conversation_id}/items",
    response_model=ItemListOut,
    responses=_PROBLEMS,
    summary="List a conversation's items",
    description="Newest first unless `order=asc`; `after` is the id of the item to continue "
    "after. The turns of responses created on the conversation appear once they finished.",
)
async def list_items(
    conversation_id: ConversationId,
    svc: Service,
    tenant: CurrentTenant,
    after: ItemId | None = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    order: Literal["asc", "desc"] = "desc",
    include: Annotated[list[str] | None, Query(max_length=16)] = None,
) -> Response:
    del include  # the extra members it asks for are never stored: nothing to add
    page = await svc.page(
        tenant_id=tenant.id,
        conversation_id=conversation_id,
        after=after,
        limit=limit,
        descending=order == "desc",
    )
    return json_response(_items(page.items, has_more=page.has_more))


@router.post(
    "/conversations/{conversation_id}/items",
    response_model=ItemListOut,
    responses=_PROBLEMS,
    summary="Add items to a conversation",
)
async def add_items(
    conversation_id: ConversationId,
    payload: AddItemsRequest,
    svc: Service,
    tenant: CurrentTenant,
    include: Annotated[list[str] | None, Query(max_length=16)] = None,
) -> Response:
    del include
    items = conversation_items.check(payload.items)
    added = await svc.add(tenant_id=tenant.id, conversation_id=conversation_id, items=items)
    return json_response(_items(added, has_more=False))
