"""The answer of every live stream route (a job's output, its event log, a Response's
events): server-sent events that hold the reader's place in its tenant's bound
(services.live_feeds) until the answer ends, however it ends, even if it never starts."""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import AsyncIterable, AsyncIterator, Iterator
from typing import TypeVar

from starlette.responses import Content, StreamingResponse

from jobgate.services.live_feeds import LiveFeeds, ReaderSlot

SSE_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
Answer = TypeVar("Answer", bound=StreamingResponse)


@contextlib.contextmanager
def admitted(feeds: LiveFeeds, tenant_id: str) -> Iterator[ReaderSlot]:
    """A place for one more reader of the tenant (errors.TooManyStreams, a 429, at the bound),
    given back if the route fails before an answer holds it."""
    slot = feeds.admit(tenant_id)
    try:
        yield slot
    except BaseException:
        slot.release()
        raise


def holding(answer: Answer, slot: ReaderSlot) -> Answer:
    """`answer`, which gives `slot` back when its body ends or, if the body never starts (the
    client left before the first byte), when the answer is dropped."""
    answer.body_iterator = _released_after(answer.body_iterator, slot)
    weakref.finalize(answer, slot.release)
    return answer


async def _released_after(body: AsyncIterable[Content], slot: ReaderSlot) -> AsyncIterator[Content]:
    try:
        async for piece in body:
            yield piece
    finally:
        slot.release()
        close = getattr(body, "aclose", None)
        if close is not None:
            await close()  # the reader's own clean-up (its feed) now, not when collected


def sse(body: AsyncIterable[bytes], slot: ReaderSlot) -> StreamingResponse:
    """A plain live stream answer holding `slot`."""
    answer = StreamingResponse(body, media_type="text/event-stream", headers=SSE_HEADERS)
    return holding(answer, slot)
