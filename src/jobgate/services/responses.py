"""OpenAI's Responses API over jobs: a response is a job with `api = "responses"` and a
`resp_` id, so it gains everything a job has (durability, retries, cancellation, signed
webhooks, idempotency) on any provider, including those with no background mode of their own.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator
from typing import Any

from jobgate import errors
from jobgate.domain import ranges, response_stream, responses
from jobgate.domain.job import Job
from jobgate.domain.response_requests import CreateRequest
from jobgate.domain.states import JobState
from jobgate.services.jobs import MAX_WAIT_S, JobService, SubmitSpec
from jobgate.storage.records import SubmitOutcome
from jobgate.wakeups import wait_for

log = logging.getLogger(__name__)

SUBMIT_ROUTE = "POST /v1/responses"  # idempotency keys are scoped per route
_DETACHED: set[asyncio.Future[Job]] = set()  # cancels outliving the request that asked
CANCEL_WAIT_S = 5.0  # how long a cancel waits for the cancellation to take effect
KEEPALIVE_S = 15.0
CHUNK_PAGE = 1000


class ResponsesService:
    def __init__(self, jobs: JobService) -> None:
        self.jobs = jobs

    async def create(
        self,
        *,
        tenant_id: str,
        request: CreateRequest,
        raw_body: Any,
        idempotency_key: str | None = None,
    ) -> SubmitOutcome:
        """Store the response as a job (an Idempotency-Key replays the original; a replay of
        a response deleted since is not found, as it would be on retrieve)."""
        spec = SubmitSpec(
            endpoint=responses.ENDPOINT,
            body=request.body,
            metadata=request.metadata,
            webhook=request.webhook,
            # OpenAI's metadata values are strings: any SDK can set the key without extras.
            concurrency_key=_concurrency_key(request.metadata),
            api=responses.API,
            id_prefix=responses.ID_PREFIX,
            stream=request.stream,
        )
        try:
            outcome = await self.jobs.submit(
                tenant_id=tenant_id,
                spec=spec,
                raw_body=raw_body,
                idempotency_key=idempotency_key,
                route=SUBMIT_ROUTE,
            )
        except errors.InvalidRequest as exc:
            # The create body is the provider body itself: `body.model` is `model` here.
            if exc.param and exc.param.startswith("body."):
                exc.param = exc.param.removeprefix("body.")
            raise
        if outcome.replayed and outcome.job.purged_at is not None:
            raise errors.NotFound("response", outcome.job.id)
        return outcome

    async def get(self, *, tenant_id: str, response_id: str) -> Job:
        """The response's job, as a Response renders it (its request may lack the `input`, the
        prompt: JobService.without_input). A job of the native API, or a deleted response, is
        not found (as OpenAI answers for a deleted response)."""
        try:
            job = await self.jobs.without_input(tenant_id=tenant_id, job_id=response_id)
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
        if job.terminal:
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
    ) -> AsyncIterator[dict[str, Any]]:
        """The stream events after sequence number `after`, then each new one as the job
        moves and its output log grows (live output streaming), until the terminal one.
        Every reader numbers the events alike (domain.response_stream), so a resume in any
        process continues exactly. Ends early if the response is deleted meanwhile."""
        storage = self.jobs.storage
        live = response_stream.LiveResponseEvents()
        read_seq = 0
        moved = True
        with storage.changes.watch_stream(response_id) as watch:
            while True:
                if moved:  # an append alone costs one read: the chunks
                    try:
                        job = await self.get(tenant_id=tenant_id, response_id=response_id)
                    except errors.NotFound:
                        return
                while True:
                    chunks = await storage.job_output_read(
                        job_id=response_id, after_seq=read_seq, limit=CHUNK_PAGE
                    )
                    if chunks:
                        read_seq = chunks[-1].seq
                    last_page = len(chunks) < CHUNK_PAGE
                    # `job` was read before these chunks: if it is terminal, they are all.
                    for event in live.advance(job if last_page else _running(job), chunks):
                        if event["sequence_number"] > after:
                            yield event
                    if last_page:
                        break
                if live.finished:
                    return
                moved = True  # after a silence, read everything again (a signal may be lost)
                if await wait_for(watch.changed, KEEPALIVE_S):
                    moved, _ = watch.take()
                else:
                    watch.take()
                    yield {}  # nothing happened: the caller sends a keep-alive


def _running(job: Job) -> Job:
    """The job as if not finished yet (while more pages of its output log are to come)."""
    return dataclasses.replace(job, state=JobState.RUNNING)


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
