"""Waiting in tests for something another task or process does: poll a condition under a
deadline meant for a loaded CI machine. A passing test does not pay the deadline; a count of
short tries (100 x 20 ms) does not survive a machine busy for two seconds."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable

DEADLINE_S = 30.0


async def eventually(
    check: Callable[[], bool | Awaitable[bool]],
    *,
    timeout_s: float = DEADLINE_S,
    interval_s: float = 0.02,
    what: str = "the condition",
) -> None:
    """Return once `check()` (sync or async) is true; AssertionError after `timeout_s`."""
    try:
        async with asyncio.timeout(timeout_s):
            while True:
                answer = check()
                if inspect.isawaitable(answer):
                    answer = await answer
                if answer:
                    return
                await asyncio.sleep(interval_s)
    except TimeoutError:
        raise AssertionError(f"{what} was not reached within {timeout_s} s") from None
