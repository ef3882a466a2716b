"""Live output streaming, worker side: run a streaming job's provider call in streaming mode
and append its output deltas to the job's durable output log through a small batcher.

The batcher writes one chunk per batch, never one per token: the first delta at once (the
time to the first token is what a reader waits for), then at most one batch per `max_delay_s`
(~50 ms), sooner once a batch holds `batch_bytes`. Every append is fenced on the job's lease
and on its purge; a fenced append stops the call (`on_fenced` finds out why). A database that
is unavailable is waited for (the lease bounds the wait); any other storage error will not
pass by retrying, so it stops the call at once (`on_failed`) and the attempt fails. Memory
stays bounded: past `max_buffer_bytes` unwritten, `add` waits for the write (the provider's
stream waits with it).

After a write, at most once per `progress_every_s` (1 s), the batcher arms the job's
`job.progress` webhooks (Storage.outbox_progress_arm; each endpoint's own interval applies
there). Progress is best effort: a failure to arm is logged and the stream goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
from collections.abc import Awaitable, Callable

from jobgate import errors, metrics
from jobgate.clock import Clock
from jobgate.domain import on_retry
from jobgate.domain.job import Job, Lease
from jobgate.providers import streaming
from jobgate.providers.base import JSONObject, Provider, ProviderCall, ProviderResult, Usage
from jobgate.storage.protocol import OutputStreamStore
from jobgate.wire import content

log = logging.getLogger(__name__)

MAX_DELAY_S = 0.05
BATCH_BYTES = 4096
MAX_BUFFER_BYTES = 256 * 1024
PROGRESS_EVERY_S = 1.0
_RETRY_MAX_S = 1.0
_READ_PAGE = 1000


def provider_body(job: Job) -> JSONObject:
    """The body the provider gets: the stored one without jobgate's stream request, stall
    timeout and retry choice (a streaming adapter asks its provider for a stream its own way)."""
    body = job.request or {}
    if "stream" in body or streaming.STALL_TIMEOUT in body or on_retry.ON_RETRY in body:
        return streaming.without_stream_members(body)
    return body


class OutputBatcher:
    """Collects one job attempt's deltas and appends them in batches, fenced on its lease; an
    attempt that continues the previous one's output (`continued_chars` > 0) says so on its
    first chunk."""

    def __init__(
        self,
        storage: OutputStreamStore,
        lease: Lease,
        *,
        generation: int,
        clock: Clock,
        continued_chars: int = 0,
        on_fenced: Callable[[], Awaitable[None]],
        on_failed: Callable[[errors.StorageError], None],
        max_delay_s: float = MAX_DELAY_S,
        batch_bytes: int = BATCH_BYTES,
        max_buffer_bytes: int = MAX_BUFFER_BYTES,
        progress_every_s: float = PROGRESS_EVERY_S,
    ) -> None:
        self._storage = storage
        self._lease = lease
        self._generation = generation
        # The first chunk repeats this many characters of the previous attempt's output.
        self._continued_chars = continued_chars
        self._clock = clock
        self._on_fenced = on_fenced
        self._on_failed = on_failed
        self._max_delay_s = max_delay_s
        self._batch_bytes = batch_bytes
        self._max_buffer_bytes = max_buffer_bytes
        self._progress_every_s = progress_every_s
        self._progress_at = -math.inf
        self._pending: list[str] = []
        self._pending_bytes = 0
        self._last_seq = 0
        self._stopped = False
        self._arrived = asyncio.Event()  # a first delta arrived in an empty buffer
        self._full = asyncio.Event()  # the batch is full: write now
        self._drained = asyncio.Event()  # a write finished (room in the buffer)
        self._flusher: asyncio.Task[None] | None = None
        self._closing = False
        self.appends = 0  # chunks written (the benchmark's database writes)

    @property
    def stopped(self) -> bool:
        """Whether writing stopped (fenced off or refused): the call is being stopped."""
        return self._stopped

    async def add(self, text: str) -> None:
        """Queue a delta; waits only while the unwritten buffer is over its bound."""
        if self._stopped or not text:
            return
        while self._pending_bytes >= self._max_buffer_bytes and not self._stopped:
            self._drained.clear()
            self._full.set()
            await self._drained.wait()
        if self._stopped:
            return
        self._pending.append(text)
        self._pending_bytes += len(text.encode())
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush_loop(), name="output batcher")
        self._arrived.set()
        if self._pending_bytes >= self._batch_bytes:
            self._full.set()

    async def close(self) -> None:
        """Write what is left (before the verdict, so a reader sees every delta before the
        terminal event) and stop the background writer. A write in flight is waited for,
        never cancelled: cancelled, it might commit and then be written again."""
        self._closing = True
        self._arrived.set()
        self._full.set()
        if self._flusher is not None:
            await asyncio.shield(self._flusher)
            self._flusher = None

    async def aclose_quietly(self) -> None:
        """Stop the background writer, dropping what is unwritten (the call was abandoned:
        cancelled, its lease lost, or the worker stopping)."""
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
            self._flusher = None

    async def _flush_loop(self) -> None:
        """Write the first delta at once (time to first token), then at most one batch per
        `max_delay_s`, sooner when a batch fills up."""
        last_write = -math.inf
        while not self._stopped:
            if not self._pending:
                if self._closing:
                    return
                self._arrived.clear()
                await self._arrived.wait()
                continue
            wait_s = last_write + self._max_delay_s - self._clock.monotonic()
            if wait_s > 0 and not self._closing and not self._full.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait_s):
                        await self._full.wait()
            self._full.clear()
            last_write = self._clock.monotonic()
            await self._write_pending()

    async def _write_pending(self) -> None:
        text = "".join(self._pending)
        count = len(self._pending)
        delay_s = 0.05
        while True:
            try:
                chunk = await self._storage.job_output_append(
                    lease=self._lease, text=text, continued_chars=self._continued_chars
                )
                break
            except errors.LeaseLost:
                self._stop()
                await self._on_fenced()
                return
            except errors.StorageUnavailable as exc:
                # The append may have committed with its answer lost: read back first.
                if await self._landed(text):
                    chunk = None
                    break
                log.warning(
                    "output append failed; retrying: %s",
                    type(exc).__name__,
                    extra={"job_id": self._lease.job_id},
                )
                await self._clock.sleep(delay_s)
                delay_s = min(delay_s * 2, _RETRY_MAX_S)
            except errors.StorageError as exc:
                log.error(
                    "output append refused; the attempt stops: %s",
                    type(exc).__name__,
                    extra={"job_id": self._lease.job_id},
                )
                self._stop()
                self._on_failed(exc)
                return
        if chunk is not None:
            self._last_seq = chunk.seq
        self._continued_chars = 0  # said once, by the first chunk
        self.appends += 1
        metrics.OUTPUT_CHUNKS.inc()
        del self._pending[:count]
        self._pending_bytes = sum(len(piece.encode()) for piece in self._pending)
        self._drained.set()
        await self._arm_progress()

    async def _arm_progress(self) -> None:
        """Arm the job's progress webhooks, at most once per `progress_every_s`."""
        if self._clock.monotonic() - self._progress_at < self._progress_every_s:
            return
        self._progress_at = self._clock.monotonic()
        try:
            await self._storage.outbox_progress_arm(job_id=self._lease.job_id)
        except errors.StorageError as exc:
            log.warning(
                "progress webhooks not armed: %s",
                type(exc).__name__,
                extra={"job_id": self._lease.job_id},
            )

    async def _landed(self, text: str) -> bool:
        try:
            after = await self._storage.job_output_read(
                job_id=self._lease.job_id, after_seq=self._last_seq
            )
        except errors.StorageError:
            return False
        for chunk in after:
            if chunk.generation == self._generation and chunk.text == text:
                self._last_seq = chunk.seq
                return True
        return False

    def _stop(self) -> None:
        """Write nothing more: the output is fenced off, or cannot be stored."""
        self._stopped = True
        self._pending.clear()
        self._pending_bytes = 0
        self._drained.set()


async def continuing_prefix(storage: OutputStreamStore, job: Job, provider: Provider) -> str:
    """The assistant prefix a retried attempt sends (domain.continuation): the latest earlier
    attempt's text, kept. Empty, so the attempt starts over (`output.reset`), for a first
    attempt, a job that restarts its retries, a provider that takes no prefix on the job's
    endpoint, or an output log that cannot be read now (starting over is always correct)."""
    if (
        job.run_count <= 1
        or not on_retry.wants_continue(job.request)
        or not streaming.prefills(provider, job.endpoint)
    ):
        return ""
    try:
        partial = await latest_text(storage, job_id=job.id, before=job.run_count)
    except errors.StorageError as exc:
        log.warning(
            "partial output unreadable; the attempt starts over: %s",
            type(exc).__name__,
            extra={"job_id": job.id},
        )
        return ""
    return on_retry.kept_prefix(partial)


async def latest_text(storage: OutputStreamStore, *, job_id: str, before: int) -> str:
    """The text of the latest generation below `before` in the job's output log."""
    generation = 0
    pieces: list[str] = []
    after = 0
    while True:
        chunks = await storage.job_output_read(job_id=job_id, after_seq=after, limit=_READ_PAGE)
        for chunk in chunks:
            if chunk.generation >= before:
                return "".join(pieces)
            if chunk.generation != generation:
                generation, pieces = chunk.generation, []
            pieces.append(chunk.text)
        if len(chunks) < _READ_PAGE:
            return "".join(pieces)
        after = chunks[-1].seq


async def call_streaming(
    provider: Provider,
    call: ProviderCall,
    batcher: OutputBatcher,
    *,
    prefix: str = "",
) -> ProviderResult:
    """Run `call` in streaming mode where the provider can, appending its deltas through
    `batcher`; a provider that cannot stream gives its whole text as one delta at the end.
    The deltas are all written before this returns or raises a provider's error (or the lease
    was lost). With a `prefix`
    (continue on retry) the provider is asked to continue it, the log starts with it, the
    answer's text is the prefix and the continuation, and its usage adds the cut attempt's
    (domain.on_retry.cut_attempt_usage)."""
    if prefix:
        call = dataclasses.replace(call, body=on_retry.with_prefix(call.body, prefix))
        await batcher.add(prefix)
    streamer = streaming.streaming_for(provider, call.endpoint)
    try:
        try:
            if streamer is not None:
                result = await streamer.stream(call, batcher.add)
            else:
                result = await provider.call(call)
                await batcher.add(content.output_text(result.body))
        except errors.ProviderError:
            # What arrived before the provider failed is written all the same: it is the
            # partial output a continuing retry goes on from.
            await batcher.close()
            raise
        await batcher.close()
    finally:
        await batcher.aclose_quietly()
    if not prefix:
        return result
    cut = Usage(*on_retry.cut_attempt_usage(result.usage.input_tokens, prefix))
    return dataclasses.replace(
        result, body=on_retry.joined(result.body, prefix), usage=result.usage + cut
    )
