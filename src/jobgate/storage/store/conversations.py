"""ConversationStore on both dialects: conversations, their items in order, and the turns of
responses still to add to them."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from jobgate.storage.executor import SqlPart
from jobgate.storage.records import Conversation, ConversationItem


class ConversationQueries(SqlPart):
    async def conversation_insert(
        self,
        *,
        conversation_id: str,
        tenant_id: str,
        metadata: dict[str, Any],
        now: datetime | None = None,
    ) -> Conversation:
        codec = self._sql.codec
        row = await self._sql.write_one(
            "conversation_insert",
            id=conversation_id,
            tenant_id=tenant_id,
            metadata=codec.json(metadata),
            now=codec.now(now),
        )
        assert row is not None
        return self._decode.record(Conversation, row)

    async def conversation_get(
        self, *, tenant_id: str, conversation_id: str
    ) -> Conversation | None:
        row = await self._sql.read_one("conversation_get", id=conversation_id, tenant_id=tenant_id)
        return None if row is None else self._decode.record(Conversation, row)

    async def conversation_delete(self, *, tenant_id: str, conversation_id: str) -> bool:
        gone = await self._sql.write("conversation_delete", id=conversation_id, tenant_id=tenant_id)
        return bool(gone)

    async def conversation_item_append(
        self,
        *,
        tenant_id: str,
        conversation_id: str,
        items: Sequence[dict[str, Any]],
        response_id: str | None = None,
        now: datetime | None = None,
    ) -> list[ConversationItem]:
        if not items:
            return []
        codec = self._sql.codec
        rows = await self._sql.write(
            "conversation_item_append",
            tenant_id=tenant_id,
            conversation_id=conversation_id,
            items=codec.json(list(items)),
            response_id=response_id,
            now=codec.now(now),
        )
        added = [self._decode.record(ConversationItem, row) for row in rows]
        return sorted(added, key=lambda item: item.position)

    async def conversation_item_page(
        self,
        *,
        tenant_id: str,
        conversation_id: str,
        after: str | None,
        limit: int,
        descending: bool,
    ) -> list[ConversationItem]:
        query = "conversation_item_page_desc" if descending else "conversation_item_page_asc"
        rows = await self._sql.read(
            query,
            tenant_id=tenant_id,
            conversation_id=conversation_id,
            after=after,
            limit=limit,
        )
        return [self._decode.record(ConversationItem, row) for row in rows]

    async def conversation_turn_insert(
        self, *, conversation_id: str, response_id: str, now: datetime | None = None
    ) -> None:
        await self._sql.write_count(
            "conversation_turn_insert",
            conversation_id=conversation_id,
            response_id=response_id,
            now=self._sql.codec.now(now),
        )

    async def conversation_turn_list(self, *, conversation_id: str) -> list[str]:
        rows = await self._sql.read("conversation_turn_list", conversation_id=conversation_id)
        return [row["response_id"] for row in rows]

    async def conversation_turn_delete(self, *, conversation_id: str, response_id: str) -> None:
        await self._sql.write_count(
            "conversation_turn_delete", conversation_id=conversation_id, response_id=response_id
        )

    async def conversation_turn_prune(
        self, *, conversation_id: str, grace_s: float, now: datetime | None = None
    ) -> int:
        return await self._sql.write_count(
            "conversation_turn_prune",
            conversation_id=conversation_id,
            grace_s=grace_s,
            now=self._sql.codec.now(now),
        )
