"""The context of a response that continues earlier turns, assembled by jobgate at create time
(so that every provider gets it, whatever API it speaks): for `previous_response_id`, the
previous response's context, its own input and its output; for `conversation`, the
conversation's items. The create stores it with the request (wire.response_items.CONTEXT).

The rules of what may be continued are domain.continuation's.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

from jobgate import errors
from jobgate.domain import continuation, responses
from jobgate.domain.job import Job
from jobgate.domain.response_requests import CreateRequest
from jobgate.services.conversations import ConversationService
from jobgate.wire import response_items, responses_objects


class ChainJobs(Protocol):
    """How the chain of a previous response is read (tenant-scoped)."""

    async def get(self, *, tenant_id: str, job_id: str) -> Job: ...

    async def without_input(self, *, tenant_id: str, job_id: str) -> Job: ...


class ResponseContexts:
    def __init__(
        self,
        *,
        jobs: ChainJobs,
        conversations: ConversationService,
        new_id: response_items.NewId,
    ) -> None:
        self.jobs = jobs
        self.conversations = conversations
        self.new_id = new_id

    async def resolve(self, *, tenant_id: str, request: CreateRequest) -> CreateRequest:
        """`request` with the context it continues (unchanged if it continues nothing);
        raises OpenAI's error when the previous response or the conversation cannot be
        continued."""
        body = request.body
        previous = body.get(continuation.PREVIOUS)
        if isinstance(previous, str):
            items, chain = await self._after_response(tenant_id, previous)
        elif (conversation := responses_objects.conversation_id(body)) is not None:
            items = await self.conversations.context(
                tenant_id=tenant_id, conversation_id=conversation
            )
            chain = []
        else:
            return request
        return dataclasses.replace(request, body=response_items.with_context(body, items, chain))

    async def _after_response(
        self, tenant_id: str, previous_id: str
    ) -> tuple[list[dict[str, Any]], list[str]]:
        """The items a response continuing `previous_id` comes after, and the responses of
        its chain (the previous one last)."""
        previous = await self._response(tenant_id, previous_id, with_input=True)
        request = previous.request or {}
        if not continuation.continuable(request):
            raise continuation.previous_not_found(previous_id)
        rendered = responses.render(previous)
        if rendered["status"] not in responses.FINISHED:
            raise continuation.previous_not_finished(previous_id)
        items, chain = response_items.context_of(request)
        for earlier in chain:  # each earlier turn must still be there
            await self._response(tenant_id, earlier, with_input=False)
        own = response_items.as_items(request.get("input"), self.new_id)
        output = [item for item in rendered["output"] if isinstance(item, dict)]
        return [*items, *own, *output], [*chain, previous_id]

    async def _response(self, tenant_id: str, response_id: str, *, with_input: bool) -> Job:
        """The tenant's response `response_id`, not deleted; else OpenAI's not-found error
        (the same for another tenant's response, a purged one, or no such id)."""
        try:
            if with_input:
                job = await self.jobs.get(tenant_id=tenant_id, job_id=response_id)
            else:
                job = await self.jobs.without_input(tenant_id=tenant_id, job_id=response_id)
        except errors.NotFound:
            raise continuation.previous_not_found(response_id) from None
        if job.api != responses.API or job.purged_at is not None:
            raise continuation.previous_not_found(response_id)
        return job
