"""Group commit for submits: concurrent submits of one tenant share one transaction.

One commit per HTTP submit is what a durable endpoint costs (PERFORMANCE.md); sharing the
commit among the callers that arrive together is how to go below it without weakening
durability: every caller is answered only after the shared transaction committed.

A tenant's submits collect in an open batch, which is flushed
- at once (on the next turn of the event loop) while fewer than `max_in_flight` flushes run:
  a lone submit waits for nothing;
- when a running flush ends, if the batch is the oldest waiting one;
- when it holds `max_items` submits;
- at the latest `window_s` after it opened, even if every flush slot is busy.
So a batch collects exactly while the database is busy with the previous ones.

A batch is one `job_insert` call of its jobs (keyed items bind their Idempotency-Key in the
same transaction, a key repeated inside the batch replays the first, a conflicting body is
refused in its own slot); a batch of one is that call with one job.
When a batch fails as a whole (a queue bound crossed by the group, a key held by another
transaction, an outage), each of its submits is retried alone, so each caller gets the
answer it would have had without the grouping: only the submit that crosses a bound fails.
Batches are per tenant because the queue bounds are.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Coroutine, Iterable, Sequence
from typing import Any, Protocol

from jobgate.clock import Clock
from jobgate.domain.job import NewJob
from jobgate.storage.records import (
    BulkItem,
    IdempotencyClaim,
    Inserted,
    QueueLimit,
    SubmitOutcome,
)

log = logging.getLogger(__name__)

WINDOW_S = 0.002
MAX_ITEMS = 100
MAX_IN_FLIGHT = 2


class GroupCommitStore(Protocol):
    """What the batcher uses of the storage: the insert."""

    async def job_insert(
        self,
        *,
        chunks: Iterable[Sequence[NewJob]],
        keys: Sequence[IdempotencyClaim | None] | None = None,
        queue_limit: QueueLimit | None = None,
    ) -> Inserted: ...


@dataclasses.dataclass(slots=True)
class _Submit:
    item: BulkItem
    queue_limit: QueueLimit | None
    answer: asyncio.Future[SubmitOutcome]


@dataclasses.dataclass(slots=True)
class _Batch:
    tenant_id: str
    submits: list[_Submit] = dataclasses.field(default_factory=list)
    deadline: asyncio.Task[None] | None = None
    scheduled: bool = False  # a flush is already on its way


class SubmitGroupCommit:
    def __init__(
        self,
        *,
        storage: GroupCommitStore,
        clock: Clock,
        window_s: float = WINDOW_S,
        max_items: int = MAX_ITEMS,
        max_in_flight: int = MAX_IN_FLIGHT,
    ) -> None:
        self.storage = storage
        self.clock = clock
        self.window_s = window_s
        self.max_items = max_items
        self.max_in_flight = max_in_flight
        self._open: dict[str, _Batch] = {}  # tenant id -> its collecting batch, oldest first
        self._in_flight = 0
        self._tasks: set[asyncio.Task[None]] = set()

    async def insert(self, item: BulkItem, queue_limit: QueueLimit | None) -> SubmitOutcome:
        """Store one submit in the next shared transaction; answered after its commit. Raises
        what a `job_insert` of this submit alone would raise (errors.QueueFull unmapped,
        errors.IdempotencyKeyReused, errors.IdempotencyInProgress, ...)."""
        answer: asyncio.Future[SubmitOutcome] = asyncio.get_running_loop().create_future()
        tenant_id = item.job.tenant_id
        batch = self._open.get(tenant_id)
        if batch is None or len(batch.submits) >= self.max_items:  # a full one is flushing
            batch = self._open[tenant_id] = _Batch(tenant_id)
            if self._in_flight < self.max_in_flight:
                self._schedule(batch)
            else:
                batch.deadline = self._spawn_coro(self._flush_at_deadline(batch))
        batch.submits.append(_Submit(item, queue_limit, answer))
        if len(batch.submits) >= self.max_items:
            self._schedule(batch)
        return await answer

    # -- flushing ----------------------------------------------------------------------------

    def _schedule(self, batch: _Batch) -> None:
        """Flush `batch` on the next turn of the loop (submits arriving in this turn join)."""
        if batch.scheduled:
            return
        batch.scheduled = True
        self._in_flight += 1
        self._spawn_coro(self._flush(batch))

    async def _flush_at_deadline(self, batch: _Batch) -> None:
        await self.clock.sleep(self.window_s)
        batch.deadline = None
        self._schedule(batch)

    async def _flush(self, batch: _Batch) -> None:
        try:
            await asyncio.sleep(0)  # let the submits of this loop turn join
            if self._open.get(batch.tenant_id) is batch:
                del self._open[batch.tenant_id]  # closed: the next submit opens a new batch
            if batch.deadline is not None:
                batch.deadline.cancel()
                batch.deadline = None
            live = [s for s in batch.submits if not s.answer.done()]  # a cancelled caller left
            if live:
                try:
                    await self._store(live)
                except Exception as exc:  # a caller must never wait for an answer that is lost
                    for submit in live:
                        _answer_error(submit, exc)
                except asyncio.CancelledError:
                    for submit in live:
                        submit.answer.cancel()
                    raise
        finally:
            self._in_flight -= 1
            self._next()

    def _next(self) -> None:
        """A flush slot is free: the oldest collecting batch takes it."""
        for batch in self._open.values():
            if not batch.scheduled:
                self._schedule(batch)
                return

    async def _store(self, submits: Sequence[_Submit]) -> None:
        if len(submits) == 1:
            await self._alone(submits[0])
            return
        bounds = _merged([s.queue_limit for s in submits])
        try:
            inserted = await self.storage.job_insert(
                chunks=[[s.item.job for s in submits]],
                keys=[s.item.idempotency for s in submits],
                queue_limit=bounds,
            )
        except Exception as exc:
            # The type only: a driver's message may quote values.
            log.debug(
                "a submit batch of %d failed (%s): each retried alone",
                len(submits),
                type(exc).__name__,
            )
            await asyncio.gather(*(self._alone(s) for s in submits))
            return
        for submit, result in zip(submits, inserted.results, strict=True):
            if isinstance(result, BaseException):
                _answer_error(submit, result)
            else:
                _answer(submit, result)

    async def _alone(self, submit: _Submit) -> None:
        try:
            inserted = await self.storage.job_insert(
                chunks=[[submit.item.job]],
                keys=[submit.item.idempotency],
                queue_limit=submit.queue_limit,
            )
        except Exception as exc:
            _answer_error(submit, exc)
            return
        (outcome,) = inserted.results
        if isinstance(outcome, BaseException):
            _answer_error(submit, outcome)
        else:
            _answer(submit, outcome)

    def _spawn_coro(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task


def _merged(limits: Sequence[QueueLimit | None]) -> QueueLimit | None:
    """The bounds a batch checks: every bound any of its submits must check (one tenant, so
    the values agree). A submit that needed no check is then checked too: harmless, the
    bound is only near, and a batch that crosses it is retried submit by submit."""
    tenant_max = next((lim.tenant_max for lim in limits if lim and lim.tenant_max), None)
    total_max = next((lim.total_max for lim in limits if lim and lim.total_max), None)
    if tenant_max is None and total_max is None:
        return None
    return QueueLimit(tenant_max=tenant_max, total_max=total_max)


def _answer(submit: _Submit, outcome: SubmitOutcome) -> None:
    if not submit.answer.done():
        submit.answer.set_result(outcome)


def _answer_error(submit: _Submit, exc: BaseException) -> None:
    if not submit.answer.done():
        submit.answer.set_exception(exc)
