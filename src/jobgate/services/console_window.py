"""The last hour's transitions for the console's charts, read in full once a minute and, in
between, only since the last settled minute: a page polling every 2 s reads a few seconds of
events, not the hour each time.

A minute is settled SETTLE_S after it ends (an event stamped just before a minute's end may
commit just after it); the settled minutes are kept, per storage, until the next minute
settles.
"""

from __future__ import annotations

import asyncio
import dataclasses
import weakref
from datetime import datetime, timedelta
from typing import Protocol

from jobgate.domain import rollups
from jobgate.domain.rollups import Transition

SETTLE_S = 10
# At most this many transitions in a read (one indexed query); past it the chart says its
# oldest minutes are incomplete rather than the read growing without bound.
MAX_TRANSITIONS = 20_000


class TransitionReader(Protocol):
    async def console_transitions(self, *, since: datetime, limit: int) -> list[Transition]: ...


@dataclasses.dataclass
class _Settled:
    until: datetime  # the end of the last settled minute
    rows: list[Transition]  # newest first, all before `until`
    capped: bool


_settled: weakref.WeakKeyDictionary[TransitionReader, _Settled] = weakref.WeakKeyDictionary()
# A lock per storage (so per event loop: a storage lives in one).
_locks: weakref.WeakKeyDictionary[TransitionReader, asyncio.Lock] = weakref.WeakKeyDictionary()


def _minute(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0)


async def last_hour(storage: TransitionReader, *, now: datetime) -> tuple[list[Transition], bool]:
    """The transitions of the charts' window (newest first) and whether the read was capped."""
    since = now - timedelta(seconds=rollups.WINDOW_S + rollups.BUCKET_S)
    boundary = _minute(now - timedelta(seconds=SETTLE_S))
    settled = _settled.get(storage)
    if settled is None or settled.until != boundary:
        lock = _locks.setdefault(storage, asyncio.Lock())
        async with lock:  # one full read per minute, however many pages poll
            settled = _settled.get(storage)
            if settled is None or settled.until != boundary:
                rows = await storage.console_transitions(since=since, limit=MAX_TRANSITIONS)
                settled = _Settled(
                    until=boundary,
                    rows=[r for r in rows if r.at < boundary],
                    capped=len(rows) >= MAX_TRANSITIONS,
                )
                _settled[storage] = settled
    recent = await storage.console_transitions(since=boundary, limit=MAX_TRANSITIONS)
    capped = settled.capped or len(recent) >= MAX_TRANSITIONS
    return recent + [r for r in settled.rows if r.at >= since], capped
