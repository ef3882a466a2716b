"""OpenAI's Responses API over jobs: a response is a job with `api = "responses"` and a
`resp_` id, so it gains everything a job has (durability, retries, cancellation, signed
webhooks, idempotency) on any provider, including those with no background mode of their own.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import Any

from jobgate import errors
from jobgate.domain import ranges, response_stream, responses
from jobgate.domain.job import Job
from jobgate.domain.response_requests import CreateRequest
from jobgate.domain.states import JobState
from jobgate.services import live_feeds
from jobgate.services.conversations import ConversationService
from jobgate.services.jobs import MAX_WAIT_S, JobService, SubmitSpec
from jobgate.services.response_context import ResponseContexts
from jobgate.storage.records import OutputChunk, SubmitOutcome
from jobgate.wire import responses_objects

log = logging.getLogger(__name__)

SUBMIT_ROUTE = "POST /v1/responses"  # idempotency keys are scoped per route
_DETACHED: set[asyncio.Future[Job]] = set()  # cancels outliving the request that asked
CANCEL_WAIT_S = 5.0  # how long a cancel waits for the cancellation to take effect
KEEPALIVE_S = 15.0


class ResponsesService:
    def __init__(self, jobs: JobService, feeds: live_feeds.LiveFeeds) -> None:
        self.jobs = jobs
        self.feeds = feeds
        self.conversations = ConversationService(storage=jobs.storage, jobs=jobs, ids=jobs.ids)
        self.contexts = ResponseContexts(
            jobs=jobs, conversations=self.conversations, new_id=jobs.ids.new
        )

    async def create(
        self,
        *,
        tenant_id: str,
        request: CreateRequest,
        raw_body: Any,
        idempotency_key: str | None = None,
    ) -> SubmitOutcome:
        """Store the response as a job (an Idempotency-Key replays the original; a replay of
        a response deleted since is not found, as it would be on retrieve). A response that
        continues earlier turns is stored with them (services.response_context); one created
        on a conversation has its turn remembered first, so that no crash after the store
        leaves the conversation without it."""
        request = await self.contexts.resolve(tenant_id=tenant_id, request=request)
        job_id = None
        conversation = responses_objects.conversation_id(request.body)
        if conversation is not None:
            job_id = self.jobs.ids.new(responses_objects.ID_PREFIX)
            await self.conversations.remember_turn(conversation_id=conversation, response_id=job_id)
        spec = spec_of(request)
        try:
            outcome = await self.jobs.submit(
                tenant_id=tenant_id,
                spec=spec,
                raw_body=raw_body,
                idempotency_key=idempotency_key,
                route=SUBMIT_ROUTE,
                job_id=job_id,
            )
        except errors.InvalidRequest as exc:
            # The create body is the provider body itself: `body.model` is `model` here.
            if exc.param and exc.param.startswith("body."):
                exc.param = exc.param.removeprefix("body.")
            raise
        if outcome.replayed and outcome.job.purged_at is not None:
            raise errors.NotFound("response", outcome.job.id)
        return outcome

    async def get(self, *, tenant_id: str, response_id: str, may_lag: bool = False) -> Job:
        """The response's job, as a Response renders it (its request may lack the `input`, the
        prompt: JobService.without_input; `may_lag`: a status read a read replica may answer).
        A job of the native API, or a deleted response, is not found (as OpenAI answers for a
        deleted response)."""
        try:
            job = await self.jobs.without_input(
                tenant_id=tenant_id, job_id=response_id, may_lag=may_lag
            )
        except errors.NotFound:
            raise errors.NotFound("response", response_id) from None
        if job.api != responses.API or job.purged_at is not None:
            raise errors.NotFound("response", response_id)
        return job

    async def wait(self, *, tenant_id: str, response_id: str, timeout_s: float) -> Job:
        """Long poll: the response once its status changes, or after `timeout_s`."""
        await self.get(tenant_id=tenant_id, response_id=response_id)
        return await self.jobs.wait(
            tenant_id=tenant_id, job_id=response_id, timeout_s=timeout_s, read_as="without_input"
        )

    async def finished(self, *, tenant_id: str, response_id: str) -> Job:
        """Wait, however long it takes, until the response is terminal (a synchronous
        create). Cancelling the caller leaves the job alone."""
        while True:
            job = await self.jobs.wait(
                tenant_id=tenant_id,
                job_id=response_id,
                timeout_s=MAX_WAIT_S,
                until_terminal=True,
                read_as="without_input",
            )
            if job.terminal:
                return job

    async def cancel(
        self, *, tenant_id: str, response_id: str, actor: str = "api", wait_s: float = CANCEL_WAIT_S
    ) -> Job:
        """Idempotent, never a conflict: a finished response is answered unchanged. A live one
        is cancelled; the answer waits up to `wait_s` for the cancellation to take effect (a
        worker stops its call at once; a provider's background job takes a status check)."""
        job = await self.get(tenant_id=tenant_id, response_id=response_id)
        if job.terminal:  # the primary's answer: the caller's next reads never go behind it
            self.jobs.reads.wrote(tenant_id)
            return job
        job = await self.jobs.cancel(tenant_id=tenant_id, job_id=response_id, actor=actor)
        if not job.terminal and wait_s > 0:
            job = await self.jobs.wait(
                tenant_id=tenant_id,
                job_id=response_id,
                timeout_s=wait_s,
                until_terminal=True,
                read_as="without_input",
            )
        return job

    async def cancel_abandoned(self, *, tenant_id: str, response_id: str) -> None:
        """The client of a synchronous create went away: cancel the response (shielded from
        the cancellation of the request that triggered it)."""
        task = asyncio.ensure_future(
            self.jobs.cancel(tenant_id=tenant_id, job_id=response_id, actor="api:disconnect")
        )
        _DETACHED.add(task)  # the loop keeps only a weak reference to a task
        task.add_done_callback(_DETACHED.discard)
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            pass  # the task carries on by itself
        except errors.JobgateError as exc:
            log.warning(
                "could not cancel an abandoned response: %s",
                type(exc).__name__,
                extra={"job_id": response_id},
            )

    async def delete(self, *, tenant_id: str, response_id: str) -> None:
        """Cancel if live, purge the input and the result; the response is gone after."""
        await self.get(tenant_id=tenant_id, response_id=response_id)
        await self.jobs.delete(tenant_id=tenant_id, job_id=response_id)

    async def events(
        self, *, tenant_id: str, response_id: str, after: int
    ) -> AsyncGenerator[dict[str, Any]]:
        """The stream events after sequence number `after`, then each new one as the job
        moves and its output log grows (live output streaming), until the terminal one.
        Every reader of the response in this process follows one feed of it
        (services.live_feeds). Every reader numbers the events alike
        (domain.response_stream), so a resume in any process continues exactly. Ends early,
        where the client can resume, if the response is deleted meanwhile or the stream
        cannot be carried on. An empty event means nothing happened for a while."""
        try:
            async with self.feeds.follow(
                tenant_id=tenant_id, job_id=response_id, kind="responses"
            ) as feed:
                async for event in _follow(feed, after):
                    yield event
        except (errors.NotFound, live_feeds.FeedEnded):
            return
        except errors.StorageError as exc:
            log.warning(
                "a live stream was cut; the client resumes: %s",
                type(exc).__name__,
                extra={"job_id": response_id},
            )


async def _follow(feed: live_feeds.JobFeed, after: int) -> AsyncIterator[dict[str, Any]]:
    live = response_stream.LiveResponseEvents()
    read_seq = 0
    seen = 0
    while True:
        snapshot = await feed.next(seen, KEEPALIVE_S)
        if snapshot is None:
            yield {}  # nothing happened: the caller sends a keep-alive
            continue
        seen = snapshot.version
        job = snapshot.job
        if job.purged_at is not None:
            return  # deleted: not found any more
        # `job` was read before the chunks: only with the last page may a terminal job end it.
        pending: Sequence[OutputChunk] | None = None
        async for page in feed.chunks_after(snapshot, read_seq):
            for event in [] if pending is None else live.advance(_running(job), pending):
                if event["sequence_number"] > after:
                    yield event
            pending = page
            read_seq = page[-1].seq if page else read_seq
        for event in live.advance(job, pending or ()):
            if event["sequence_number"] > after:
                yield event
        if live.finished:
            return


def _running(job: Job) -> Job:
    """The job as if not finished yet (while more pages of its output log are to come)."""
    return dataclasses.replace(job, state=JobState.RUNNING)


def spec_of(request: CreateRequest) -> SubmitSpec:
    """The job a create stores (shared with a /v1/responses batch line's, which the batch
    then makes its own: its metadata, priority, no webhook, no stream)."""
    return SubmitSpec(
        endpoint=responses.ENDPOINT,
        body=request.body,
        metadata=request.metadata,
        webhook=request.webhook,
        # OpenAI's metadata values are strings: any SDK can set the key without extras.
        concurrency_key=_concurrency_key(request.metadata),
        api=responses.API,
        id_prefix=responses_objects.ID_PREFIX,
        stream=request.stream,
        on_retry=request.on_retry,
    )


def _concurrency_key(metadata: dict[str, Any]) -> str | None:
    """`metadata.concurrency_key` of a create: the concurrency key of its job."""
    key = metadata.get("concurrency_key")
    if key is None:
        return None
    if not isinstance(key, str):
        raise errors.InvalidRequest(
            "metadata.concurrency_key must be a string",
            param="metadata.concurrency_key",
            code="invalid_concurrency_key",
        )
    ranges.check_concurrency_key(key, param="metadata.concurrency_key")
    return key
