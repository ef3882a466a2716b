"""A transaction that locks many job rows in id order can deadlock with a worker's heartbeat
or batched finish, which lock the rows they hold in their own order; PostgreSQL then aborts
one of the two. The aborted transaction rolled back whole, so running it again is safe; if it
keeps losing, the caller gets StorageUnavailable (a 503 with Retry-After)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import asyncpg

from jobgate import errors

T = TypeVar("T")
ATTEMPTS = 3


async def retry_deadlocks(run: Callable[[], Awaitable[T]], what: str) -> T:
    """`run()` (one transaction), run again when PostgreSQL aborted it to break a deadlock."""
    for attempt in range(ATTEMPTS):
        try:
            return await run()
        except errors.StorageError as exc:
            if not isinstance(exc.__cause__, asyncpg.exceptions.DeadlockDetectedError):
                raise
            if attempt == ATTEMPTS - 1:
                raise errors.StorageUnavailable(f"{what} deadlocked: {exc}") from exc
    raise AssertionError("unreachable")
