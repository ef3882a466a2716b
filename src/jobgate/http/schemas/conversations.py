"""Request and response schemas of /v1/conversations (validation and /openapi.json), as
OpenAI's Conversations API defines them. Items are checked member by member by
domain.conversation_items."""

from __future__ import annotations

from typing import Any, Literal

import pydantic

from jobgate.domain import conversation_items
from jobgate.http.schemas.responses import MetadataKey, MetadataValue, ShortText


class CreateConversationRequest(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(strict=True, extra="forbid")

    items: list[dict[str, Any]] | None = pydantic.Field(
        default=None,
        max_length=conversation_items.MAX_ITEMS,
        description="Input items the conversation starts with (at most 20)",
    )
    metadata: dict[MetadataKey, MetadataValue] | None = pydantic.Field(default=None, max_length=16)
    safety_identifier: ShortText | None = None


class AddItemsRequest(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(strict=True, extra="forbid")

    items: list[dict[str, Any]] = pydantic.Field(
        min_length=1,
        max_length=conversation_items.MAX_ITEMS,
        description="Input items to add after the last (at most 20)",
    )


class ConversationOut(pydantic.BaseModel):
    id: str
    object: Literal["conversation"]
    created_at: int
    metadata: dict[str, Any]


class DeletedConversationOut(pydantic.BaseModel):
    id: str
    object: Literal["conversation.deleted"]
    deleted: Literal[True]


class ItemListOut(pydantic.BaseModel):
    object: Literal["list"]
    data: list[dict[str, Any]]
    first_id: str | None
    last_id: str | None
    has_more: bool
