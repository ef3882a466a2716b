"""Live stream readers share one feed per job and process (fan-out), and a tenant's readers
are bounded.

A `JobFeed` is the one task of this process that follows a job for its readers: it registers
for the job's wake-ups, reads the job, then what came after it last read (output chunks, or
transitions for the event log), and publishes both as one immutable `Snapshot`. However many
readers follow a job, an append or a move costs one read here, not one per reader; readers
only wait for the next snapshot and write it to their own client. A feed reads the job before
what follows it, so a snapshot whose job is terminal holds everything there is.

A feed keeps the last `WINDOW` chunks in memory from where its first reader started; a reader
further behind reads the rest from storage once, by pages, and then follows the feed. A read
that fails (storage unavailable) is retried with backoff while the readers send keep-alives;
the feed ends when its last reader leaves.

`LiveFeeds.admit` bounds the readers a tenant holds in this process
(`stream_readers_per_tenant`): one more is refused with errors.TooManyStreams (429).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Literal

from jobgate import errors, metrics
from jobgate.domain.job import Job, JobEvent
from jobgate.services.jobs import JobService
from jobgate.storage.records import OutputChunk
from jobgate.wakeups import wait_for

log = logging.getLogger(__name__)

FeedKind = Literal["output", "responses", "events"]
WINDOW = 4096  # chunks a feed keeps in memory
PAGE = 1000  # chunks (or events) per storage read
RETRY_S = (0.5, 1.0, 2.0, 5.0)  # after a failed read, then the last one again
REFUSED_RETRY_AFTER_S = 5


class FeedEnded(Exception):
    """The feed stopped without the job ending (a defect was logged): resume elsewhere."""


@dataclasses.dataclass(frozen=True, slots=True)
class Snapshot:
    """What a feed knows, published whole: `job` was read before `chunks` and `events`.
    `chunks` holds every chunk of the log with a seq above `window_after`; older ones are only
    in storage. `version` grows with every publication."""

    job: Job
    chunks: tuple[OutputChunk, ...]
    window_after: int
    events: tuple[JobEvent, ...]
    version: int

    def window_after_seq(self, seq: int) -> Sequence[OutputChunk]:
        """The window's chunks after `seq` (all of them when `seq` is below the window)."""
        return self.chunks[bisect.bisect_right(self.chunks, seq, key=_seq) :]


class JobFeed:
    """One job followed for every reader of it in this process (see the module docstring)."""

    def __init__(
        self, jobs: JobService, *, tenant_id: str, job_id: str, kind: FeedKind, start: int
    ) -> None:
        self._jobs = jobs
        self.tenant_id = tenant_id
        self.job_id = job_id
        self.kind = kind
        self._snapshot: Snapshot | None = None
        self._window_after = start
        self._published = asyncio.Event()
        self._gone = False
        self._failed = False
        self.followers = 0
        self.task: asyncio.Task[None] | None = None

    # -- readers -----------------------------------------------------------------------

    async def next(self, seen: int, timeout_s: float) -> Snapshot | None:
        """The snapshot once it is newer than version `seen`, or None after `timeout_s` without
        one. Raises errors.NotFound once the job is gone (deleted), FeedEnded if the feed
        itself failed (the reader ends its stream where the client can resume)."""
        if self._current() is None or self._current_version() == seen:
            published = self._published
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    await published.wait()
        snapshot = self._current()
        return None if snapshot is None or snapshot.version == seen else snapshot

    async def chunks_after(
        self, snapshot: Snapshot, seq: int
    ) -> AsyncIterator[Sequence[OutputChunk]]:
        """The output after `seq` as of `snapshot`, by pages: what lies before the window
        from storage (a reader that started behind it), then the window's."""
        if snapshot.job.purged_at is not None:
            return
        while seq < snapshot.window_after:
            page = await self._jobs.storage.job_output_read(
                job_id=self.job_id, after_seq=seq, limit=PAGE
            )
            page = [chunk for chunk in page if chunk.seq <= snapshot.window_after]
            if not page:
                break
            yield page
            seq = page[-1].seq
        yield snapshot.window_after_seq(seq)

    def _current(self) -> Snapshot | None:
        if self._gone:
            raise errors.NotFound("job", self.job_id)
        if self._failed:
            raise FeedEnded(self.job_id)
        return self._snapshot

    def _current_version(self) -> int:
        return -1 if self._snapshot is None else self._snapshot.version

    # -- the one reader of storage ----------------------------------------------------------

    async def run(self) -> None:
        """Follow the job until it is terminal (then keep its last snapshot) or gone."""
        try:
            await self._follow()
        except Exception:
            # A defect, not an outage (those are retried): the readers end where they can
            # resume, rather than wait on a feed that will never publish again.
            log.exception("a live feed failed", extra={"job_id": self.job_id})
            self._failed = True
            self._publish_event()

    async def _follow(self) -> None:
        storage = self._jobs.storage
        failures = 0
        with storage.changes.watch_stream(self.job_id) as watch:
            moved = True
            while True:
                try:
                    await self._read(moved)
                except errors.NotFound:
                    self._gone = True
                    self._publish_event()
                    return
                except errors.StorageError as exc:
                    pause = RETRY_S[min(failures, len(RETRY_S) - 1)]
                    if failures == 0:
                        log.warning(
                            "a live feed could not read its job; retrying: %s",
                            type(exc).__name__,
                            extra={"job_id": self.job_id},
                        )
                    failures += 1
                    await asyncio.sleep(pause)
                    moved = True
                    continue
                failures = 0
                snapshot = self._snapshot
                if snapshot is not None and snapshot.job.terminal:
                    return
                moved = True  # after a silence, read everything again (a signal may be lost)
                if await wait_for(watch.changed, self._jobs.poll_fallback_s):
                    moved, _ = watch.take()
                else:
                    watch.take()

    async def _read(self, moved: bool) -> None:
        """Read what changed and publish it; nothing new publishes nothing (a reader woken
        for nothing costs as much as one woken for a delta)."""
        old = self._snapshot
        job = old.job if old is not None and not moved else await self._read_job()
        chunks = () if old is None else old.chunks
        events = () if old is None else old.events
        if self.kind == "events":
            if moved or old is None:
                events += tuple(await self._events_after(events[-1].seq if events else 0))
        elif job.purged_at is not None:  # a purge drops the output with the result
            chunks = ()
        else:
            last = chunks[-1].seq if chunks else self._window_after
            chunks += tuple(await self._chunks_after(last))
            if len(chunks) > WINDOW:
                chunks = chunks[-WINDOW // 2 :]
                self._window_after = chunks[0].seq - 1
        if old is not None and _same(old, job, chunks, events):
            return
        version = 1 if old is None else old.version + 1
        self._snapshot = Snapshot(job, chunks, self._window_after, events, version)
        self._publish_event()

    def _publish_event(self) -> None:
        published, self._published = self._published, asyncio.Event()
        published.set()

    async def _read_job(self) -> Job:
        if self.kind == "responses":  # rendered as a Response: everything but its input
            return await self._jobs.without_input(tenant_id=self.tenant_id, job_id=self.job_id)
        return await self._jobs.view(tenant_id=self.tenant_id, job_id=self.job_id)

    async def _chunks_after(self, seq: int) -> list[OutputChunk]:
        found: list[OutputChunk] = []
        while True:
            page = await self._jobs.storage.job_output_read(
                job_id=self.job_id, after_seq=seq, limit=PAGE
            )
            found += page
            if len(page) < PAGE:
                return found
            seq = page[-1].seq

    async def _events_after(self, seq: int) -> list[JobEvent]:
        found: list[JobEvent] = []
        while True:
            page = await self._jobs.storage.job_events(
                job_id=self.job_id, after_seq=seq, limit=PAGE
            )
            found += page
            if len(page) < PAGE:
                return found
            seq = page[-1].seq


class ReaderSlot:
    """A reader's place in its tenant's bound; `release` is idempotent."""

    def __init__(self, on_release: Callable[[], None]) -> None:
        self._on_release: Callable[[], None] | None = on_release

    def release(self) -> None:
        if self._on_release is not None:
            self._on_release()
            self._on_release = None


class LiveFeeds:
    """This process's feeds, one per (tenant, job, kind) being read, and its readers' count
    per tenant."""

    def __init__(self, jobs: JobService, *, readers_per_tenant: int) -> None:
        self._jobs = jobs
        self.readers_per_tenant = readers_per_tenant
        self._feeds: dict[tuple[str, str, FeedKind], JobFeed] = {}
        self._readers: dict[str, int] = {}

    def admit(self, tenant_id: str) -> ReaderSlot:
        """A place for one more reader of `tenant_id`; errors.TooManyStreams at the bound.
        Release it when the reader ends (or never starts)."""
        held = self._readers.get(tenant_id, 0)
        if held >= self.readers_per_tenant:
            metrics.STREAM_READERS_REFUSED.inc()
            raise errors.TooManyStreams(self.readers_per_tenant, REFUSED_RETRY_AFTER_S)
        self._readers[tenant_id] = held + 1
        metrics.STREAM_READERS.inc()
        return ReaderSlot(lambda: self._leave(tenant_id))

    def _leave(self, tenant_id: str) -> None:
        metrics.STREAM_READERS.dec()
        left = self._readers.get(tenant_id, 1) - 1
        if left > 0:
            self._readers[tenant_id] = left
        else:
            self._readers.pop(tenant_id, None)

    def readers(self, tenant_id: str) -> int:
        return self._readers.get(tenant_id, 0)

    @property
    def feed_count(self) -> int:
        return len(self._feeds)

    @contextlib.asynccontextmanager
    async def follow(
        self, *, tenant_id: str, job_id: str, kind: FeedKind, start: int = 0
    ) -> AsyncIterator[JobFeed]:
        """The feed of the job, started for this reader if nobody in this process follows it
        yet (keeping chunks from seq `start` on); it stops when its last follower leaves."""
        key = (tenant_id, job_id, kind)
        feed = self._feeds.get(key)
        if feed is None:
            feed = JobFeed(self._jobs, tenant_id=tenant_id, job_id=job_id, kind=kind, start=start)
            feed.task = asyncio.create_task(feed.run(), name=f"live feed {job_id}")
            self._feeds[key] = feed
            metrics.STREAM_FEEDS.inc()
        feed.followers += 1
        try:
            yield feed
        finally:
            feed.followers -= 1
            if feed.followers == 0 and self._feeds.get(key) is feed:
                del self._feeds[key]
                metrics.STREAM_FEEDS.dec()
                assert feed.task is not None
                feed.task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await feed.task


def _seq(chunk: OutputChunk) -> int:
    return chunk.seq


def _same(
    old: Snapshot, job: Job, chunks: tuple[OutputChunk, ...], events: tuple[JobEvent, ...]
) -> bool:
    """Whether a read found nothing `old` does not hold (the tuples only ever grow, or are
    emptied by a purge, so their ends and lengths tell)."""
    return (
        job == old.job
        and len(chunks) == len(old.chunks)
        and (not chunks or chunks[-1].seq == old.chunks[-1].seq)
        and len(events) == len(old.events)
    )
