"""Circuit breakers shared across worker processes: the breaker changes this process
made since the last claim are written to the database, and the breakers open in the database
are read back at most once every READ_EVERY_S, so a provider one process found broken is left
alone by every process within about a second (providers.gates has the breaker itself)."""

from __future__ import annotations

import asyncio
import logging

from jobgate.clock import Clock
from jobgate.providers.gates import ProviderGates
from jobgate.storage import protocol

log = logging.getLogger(__name__)

READ_EVERY_S = 1.0


class BreakerSync:
    """`writes=False` (the API, choosing a model route's first target) only reads: the worker
    of the same process writes its changes, one writer per list of changes."""

    def __init__(
        self,
        *,
        storage: protocol.RateLimitStore,
        gates: ProviderGates,
        clock: Clock,
        owner: str,
        writes: bool = True,
    ) -> None:
        self._storage = storage
        self._gates = gates
        self._clock = clock
        self._owner = owner
        self._writes = writes
        self._read_at: float | None = None
        self._reading = asyncio.Lock()

    def _stale(self) -> bool:
        return self._read_at is None or self._clock.monotonic() - self._read_at >= READ_EVERY_S

    async def sync(self) -> None:
        """Write this process's breaker changes, then read everyone's (cached). A database
        error is logged and the changes kept for the next claim: claims go on meanwhile."""
        try:
            if self._writes:
                await self._write()
            if self._stale():
                async with self._reading:  # callers finding it stale together share one read
                    if self._stale():
                        now = self._clock.monotonic()
                        self._gates.apply_shared(await self._storage.breaker_states())
                        self._read_at = now
        except Exception:  # the claim goes on without the shared state
            log.warning("shared breaker state not synced", exc_info=True)

    async def _write(self) -> None:
        changes = self._gates.breaker_changes
        while changes:
            # Taken before the write (two workers of one process never write one change
            # twice), put back if the write fails.
            provider, open_s = change = changes.pop(0)
            try:
                if open_s is None:
                    await self._storage.breaker_close(provider=provider)
                else:
                    await self._storage.breaker_open(
                        provider=provider, open_s=open_s, opened_by=self._owner
                    )
            except Exception:
                changes.insert(0, change)
                raise
            self._read_at = None  # read the result back at once
