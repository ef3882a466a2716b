"""A storage wrapper for race tests: fail a call before it runs, lose the reply of a call after
it committed, or run a hook right after a call returns, before its caller sees the answer (to
put another actor's write at an exact point):

    storage = FaultyStorage(real)
    storage.fail("job_claim_by_id")                    # raises StorageUnavailable, nothing ran
    storage.lose_reply("job_background_accept")        # commits, then the caller gets
                                                       # StorageUnavailable (a reset, a timeout)
    storage.after("job_finish_many", reclaim)          # `await reclaim()` once the finish returned

A lost reply is what a connection reset or a command timeout after COMMIT looks like to the
caller: the write is durable, the answer never came. Each arming fires `times` times (default
once). Every other attribute is the wrapped storage's.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from jobgate import errors


@dataclasses.dataclass(slots=True)
class _Armed:
    fail: int = 0
    lose_reply: int = 0
    hooks: list[Callable[[], Awaitable[object]]] = dataclasses.field(default_factory=list)


class FaultyStorage:
    def __init__(self, storage: Any) -> None:
        self._storage = storage
        self._armed: dict[str, _Armed] = {}
        self.lost: list[str] = []  # the calls whose reply was lost, in order

    def fail(self, method: str, *, times: int = 1) -> None:
        """The next `times` calls of `method` raise StorageUnavailable without running (the
        database was unreachable: a restart, a failover, a reset before the statement left)."""
        self._armed.setdefault(method, _Armed()).fail += times

    def lose_reply(self, method: str, *, times: int = 1) -> None:
        """The next `times` calls of `method` run to their commit, then raise
        StorageUnavailable instead of answering."""
        self._armed.setdefault(method, _Armed()).lose_reply += times

    def after(self, method: str, hook: Callable[[], Awaitable[object]]) -> None:
        """Await `hook()` once, right after the next call of `method` returned."""
        self._armed.setdefault(method, _Armed()).hooks.append(hook)

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._storage, name)
        if not inspect.iscoroutinefunction(target):
            return target

        @functools.wraps(target)
        async def call(*args: Any, **kwargs: Any) -> Any:
            failing = self._armed.get(name)
            if failing is not None and failing.fail > 0:
                failing.fail -= 1
                raise errors.StorageUnavailable(f"{name}: the database is unreachable (injected)")
            answer = await target(*args, **kwargs)
            armed = self._armed.get(name)
            if armed is None:
                return answer
            if armed.hooks:
                await armed.hooks.pop(0)()
            if armed.lose_reply > 0:
                armed.lose_reply -= 1
                self.lost.append(name)
                raise errors.StorageUnavailable(f"{name}: reply lost after commit (injected)")
            return answer

        return call
