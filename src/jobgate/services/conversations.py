"""OpenAI's Conversations API over storage: a tenant's conversations and their items, and the
turns of the responses created on one.

A response created with `conversation` reads the conversation's items as its context; once it
has finished, its turn (its own input items, then its output items) is added to the
conversation. The turn is remembered before the response is stored and added by the next
reader of the conversation after the response finished (listing its items, adding items,
creating a response on it), so no process has to be there when the response finishes, and a
crash between two steps repeats a step that adds nothing twice (the turn's item ids are fixed
by the response).

Rules kept here:
- Only a completed or incomplete, stored (`store` not false) response adds its turn; a failed,
  cancelled, expired, deleted or purged one adds nothing.
- Items a turn added stay in the conversation when the response is later deleted or purged by
  retention: they are the conversation's. A conversation is kept until it is deleted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Protocol

from jobgate import errors
from jobgate.domain import continuation, responses
from jobgate.domain.job import Job
from jobgate.ids import IdGenerator
from jobgate.storage.feature_protocol import ConversationStore
from jobgate.storage.records import Conversation, ConversationItem
from jobgate.wire import response_items, responses_objects

ID_PREFIX = "conv"
MAX_CONTEXT_ITEMS = 10_000  # the items a response reads as its context, at most
# A remembered turn whose response is still not stored after this long never will be (its
# create failed, or answered an earlier create's replay under another id).
ORPHAN_TURN_S = 3600.0


class TurnJobs(Protocol):
    """How the conversations read the responses whose turns they take."""

    async def get(self, *, tenant_id: str, job_id: str) -> Job: ...


@dataclasses.dataclass(frozen=True, slots=True)
class ItemPage:
    items: list[ConversationItem]
    has_more: bool


class ConversationService:
    def __init__(self, *, storage: ConversationStore, jobs: TurnJobs, ids: IdGenerator) -> None:
        self.storage = storage
        self.jobs = jobs
        self.ids = ids

    async def create(
        self,
        *,
        tenant_id: str,
        metadata: dict[str, Any],
        items: Sequence[dict[str, Any]],
    ) -> Conversation:
        """A new conversation holding `items` (input items, each given a new id)."""
        conversation = await self.storage.conversation_insert(
            conversation_id=self.ids.new(ID_PREFIX), tenant_id=tenant_id, metadata=metadata
        )
        if items:
            await self.storage.conversation_item_append(
                tenant_id=tenant_id,
                conversation_id=conversation.id,
                items=self._fresh(items),
            )
        return conversation

    async def get(self, *, tenant_id: str, conversation_id: str) -> Conversation:
        found = await self.storage.conversation_get(
            tenant_id=tenant_id, conversation_id=conversation_id
        )
        if found is None:
            raise continuation.conversation_not_found(conversation_id)
        return found

    async def delete(self, *, tenant_id: str, conversation_id: str) -> None:
        """Delete the conversation and its items (the responses created on it stay)."""
        if not await self.storage.conversation_delete(
            tenant_id=tenant_id, conversation_id=conversation_id
        ):
            raise continuation.conversation_not_found(conversation_id)

    async def add(
        self, *, tenant_id: str, conversation_id: str, items: Sequence[dict[str, Any]]
    ) -> list[ConversationItem]:
        """Append `items` (each given a new id) after the finished turns; answer them."""
        await self.take_turns(tenant_id=tenant_id, conversation_id=conversation_id)
        added = await self.storage.conversation_item_append(
            tenant_id=tenant_id, conversation_id=conversation_id, items=self._fresh(items)
        )
        if not added:  # deleted meanwhile
            raise continuation.conversation_not_found(conversation_id)
        return added

    async def page(
        self,
        *,
        tenant_id: str,
        conversation_id: str,
        after: str | None,
        limit: int,
        descending: bool,
    ) -> ItemPage:
        await self.take_turns(tenant_id=tenant_id, conversation_id=conversation_id)
        items = await self.storage.conversation_item_page(
            tenant_id=tenant_id,
            conversation_id=conversation_id,
            after=after,
            limit=limit + 1,
            descending=descending,
        )
        return ItemPage(items=items[:limit], has_more=len(items) > limit)

    async def context(self, *, tenant_id: str, conversation_id: str) -> list[dict[str, Any]]:
        """The items a response created on the conversation continues from, oldest first."""
        page = await self.page(
            tenant_id=tenant_id,
            conversation_id=conversation_id,
            after=None,
            limit=MAX_CONTEXT_ITEMS,
            descending=False,
        )
        return [item.item for item in page.items]

    async def remember_turn(self, *, conversation_id: str, response_id: str) -> None:
        """The response `response_id` (not stored yet) adds its turn once it finishes."""
        await self.storage.conversation_turn_insert(
            conversation_id=conversation_id, response_id=response_id
        )

    async def take_turns(self, *, tenant_id: str, conversation_id: str) -> None:
        """Add the turns of the conversation's finished responses (in the order they were
        created); forget those that will never add one. A response still running keeps its
        turn for a later reader."""
        await self.get(tenant_id=tenant_id, conversation_id=conversation_id)
        await self.storage.conversation_turn_prune(
            conversation_id=conversation_id, grace_s=ORPHAN_TURN_S
        )
        for response_id in await self.storage.conversation_turn_list(
            conversation_id=conversation_id
        ):
            try:
                job = await self.jobs.get(tenant_id=tenant_id, job_id=response_id)
            except errors.NotFound:
                continue  # not stored (yet, or ever: pruned above once old)
            if not job.terminal:
                continue
            items = turn_items(job)
            if items:
                await self.storage.conversation_item_append(
                    tenant_id=tenant_id,
                    conversation_id=conversation_id,
                    items=items,
                    response_id=response_id,
                )
            await self.storage.conversation_turn_delete(
                conversation_id=conversation_id, response_id=response_id
            )

    def _fresh(self, items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Input items as conversation items, each with an id of its own."""
        return [
            response_items.item_of({k: v for k, v in item.items() if k != "id"}, self.ids.new)
            for item in items
        ]


def turn_items(job: Job) -> list[dict[str, Any]]:
    """What a finished response adds to its conversation: its own input items, then its
    output items; nothing for a response that did not complete, was deleted, or was not
    stored. The input items' ids are made from the response's, so the same turn always has
    the same ids."""
    request = job.request or {}
    rendered = responses.render(job)
    if (
        job.purged_at is not None
        or rendered["status"] not in responses.FINISHED
        or not continuation.continuable(request)
    ):
        return []
    suffix = job.id.removeprefix(f"{responses_objects.ID_PREFIX}_")
    count = iter(range(1_000_000))

    def turn_id(prefix: str) -> str:
        return f"{prefix}_{suffix}_in{next(count)}"

    own = response_items.as_items(request.get("input"), turn_id)
    output = [item for item in rendered["output"] if isinstance(item, dict)]
    return [*own, *(response_items.item_of(item, turn_id) for item in output)]
