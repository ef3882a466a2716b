"""The worker's group commit of verdicts: those that arrive while a write is in flight are
written together, in the next one."""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from jobgate import errors, failpoints, metrics
from jobgate.domain import verdicts
from jobgate.domain.verdicts import Finish, Poisoning
from jobgate.services.poison_log import log_poison
from jobgate.storage import protocol
from jobgate.storage.records import Finished

MAX_BATCH = 500  # verdicts written by one statement (the worker's claim batch, too)


class _Waiter(Protocol):
    """Who waits for one verdict's write: a future, or one member of a group."""

    def done(self) -> bool: ...

    def set_result(self, result: Finished | None, /) -> None: ...

    def set_exception(self, exception: BaseException, /) -> None: ...


class _Group:
    """The outcomes of verdicts queued together, answered at once when the last is known
    (one wake-up for the batch, not a future and a callback per verdict)."""

    __slots__ = ("future", "left", "outcomes")

    def __init__(self, future: asyncio.Future[list[Any]], size: int) -> None:
        self.future = future
        self.left = size
        self.outcomes: list[Any] = [None] * size


class _Member:
    """One verdict of a group, settled as a future would be."""

    __slots__ = ("_done", "group", "index")

    def __init__(self, group: _Group, index: int) -> None:
        self.group = group
        self.index = index
        self._done = False

    def done(self) -> bool:
        return self._done

    def set_result(self, result: Finished | None, /) -> None:
        self._settle(result)

    def set_exception(self, exception: BaseException, /) -> None:
        self._settle(exception)

    def _settle(self, outcome: Finished | BaseException | None) -> None:
        self._done = True
        group = self.group
        group.outcomes[self.index] = outcome
        group.left -= 1
        if group.left == 0 and not group.future.done():
            group.future.set_result(group.outcomes)


class FinishGroupCommit:
    """Write the verdicts that arrive while a write is in flight together, in the next one."""

    def __init__(self, storage: protocol.JobLeaseStore, *, max_batch: int = MAX_BATCH) -> None:
        self._storage = storage
        self._max_batch = max_batch
        self._pending: list[tuple[Finish, _Waiter]] = []
        self._flusher: asyncio.Task[None] | None = None

    async def finish(self, finish: Finish) -> Finished | None:
        future: asyncio.Future[Finished | None] = asyncio.get_running_loop().create_future()
        self._pending.append((finish, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush())
        return await asyncio.shield(future)

    async def finish_many(self, finishes: list[Finish]) -> list[Finished | BaseException | None]:
        """`finish` for each verdict, queued together: each one's outcome, in order (what
        `finish` would return, or the exception it would raise)."""
        if not finishes:
            return []
        future: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        group = _Group(future, len(finishes))
        self._pending.extend((finish, _Member(group, i)) for i, finish in enumerate(finishes))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush())
        return await asyncio.shield(future)

    async def _flush(self) -> None:
        while self._pending:
            batch = self._pending[: self._max_batch]
            del self._pending[: self._max_batch]
            try:
                failpoints.hit("before_finish_commit")
                results = await self._storage.job_finish_many(finishes=[f for f, _ in batch])
                failpoints.hit("after_finish_commit")
            except errors.StorageError as exc:
                if isinstance(exc, errors.StorageUnavailable):
                    for _, future in batch:  # each caller decides whether to retry
                        if not future.done():
                            future.set_exception(exc)
                    continue
                # The database refused the batch: write each verdict alone, so that one it
                # cannot store (a NUL in a result, on PostgreSQL) fails alone.
                for finish, future in batch:
                    await self._finish_alone(finish, future)
                continue
            except Exception as exc:  # each caller decides whether to retry
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for (_, future), result in zip(batch, results, strict=True):
                if not future.done():
                    future.set_result(result)

    async def _finish_alone(self, finish: Finish, future: _Waiter) -> None:
        """One verdict on its own; one the database refuses is replaced by `poison_job`."""
        try:
            try:
                [result] = await self._storage.job_finish_many(finishes=[finish])
            except errors.StorageUnavailable:
                raise
            except errors.StorageError as exc:
                detail = f"its verdict could not be stored ({type(exc).__name__})"
                log_poison("worker", Poisoning(finish.lease.job_id, detail, exc))
                metrics.POISON_JOBS.labels("worker").inc()
                poison = verdicts.poison_finish(finish, detail)
                [result] = await self._storage.job_finish_many(finishes=[poison])
        except Exception as exc:
            if not future.done():
                future.set_exception(exc)
            return
        if not future.done():
            future.set_result(result)
