"""A small Server-Sent Events decoder (the WHATWG event-stream format), fed line by line."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True, slots=True)
class ServerSentEvent:
    event: str
    data: str
    id: str | None
    retry_ms: int | None = None


class SSEDecoder:
    """Feed it the stream's lines (without their line endings); it returns each event as its
    terminating blank line arrives. Comments (`: keep-alive`) are skipped."""

    def __init__(self) -> None:
        self._event = ""
        self._data: list[str] = []
        self._id: str | None = None
        self._retry_ms: int | None = None
        self.last_event_id: str | None = None

    def feed(self, line: str) -> ServerSentEvent | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            self._event = value
        elif field == "data":
            self._data.append(value)
        elif field == "id" and "\0" not in value:
            self._id = value
        elif field == "retry" and value.isdigit():
            self._retry_ms = int(value)
        return None

    def _dispatch(self) -> ServerSentEvent | None:
        if self._id is not None:
            self.last_event_id = self._id
        if not self._data and not self._event:
            self._id = None
            return None
        event = ServerSentEvent(
            event=self._event or "message",
            data="\n".join(self._data),
            id=self._id if self._id is not None else self.last_event_id,
            retry_ms=self._retry_ms,
        )
        self._event, self._data, self._id, self._retry_ms = "", [], None, None
        return event
