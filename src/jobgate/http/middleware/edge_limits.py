"""Bounds on a request's head, enforced while it is read (uvicorn's httptools protocol has none:
a 64 MB header would be buffered whole before any answer).

- the head (request line and headers) may take at most `max_request_head_bytes`: past it the
  connection answers 431 and closes, having held at most that plus one read of memory;
- at most `max_request_headers` header fields (431) and a request target of at most
  `max_request_line_bytes` (414);
- the head must arrive within `request_head_timeout_s` of its first byte (or of the connection
  opening): a slow-loris client is closed then, while a slow body has the whole
  `request_receipt_timeout_s` (http.middleware.receipt_timeout).

Two costs per request are saved on the way: a request that arrives whole in one read never arms
the head and receipt timers (they are armed after the read, only for a request still incomplete
then), and a response with a Content-Length leaves in one write, its head held until its body's
first bytes (uvicorn writes them apart: two sends and two TCP segments on every answer). The
keep-alive clock is lazy: uvicorn arms a timer after every answer and cancels it at the next
request; here one timer per connection runs, and when it fires while the connection has been
busy since, it is re-armed for the rest (the same deadline: `timeout_keep_alive` after the last
answer, with no byte since).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httptools
import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from jobgate.config import Settings
from jobgate.http import problems
from jobgate.http.middleware.receipt_timeout import ReceiptTimeoutProtocol

log = logging.getLogger(__name__)
LINGER_S = 1.0  # after a refusal: how long the connection drains before it closes
_REASONS = {400: b"Bad Request", 414: b"URI Too Long", 431: b"Request Header Fields Too Large"}
_CODES = {400: "invalid_http_request", 414: "uri_too_long", 431: "request_header_fields_too_large"}


class _HeldHead:
    """A request cycle's transport that holds the response head until the body's first write,
    when the response declares a Content-Length (so its body follows at once: Starlette's
    `Response` sends both back to back); both then leave in one write. Chunked, HEAD and
    empty answers are written as uvicorn writes them. Closing writes a held head first."""

    __slots__ = ("_cycle", "_first", "_head", "_transport")

    def __init__(self, transport: asyncio.Transport, cycle: RequestResponseCycle) -> None:
        self._transport = transport
        self._cycle = cycle
        self._head: bytes | None = None
        self._first = True  # no write yet: the first one of a started response is its head

    def write(self, data: bytes) -> None:
        head = self._head
        if head is not None:
            self._head = None
            self._transport.write(head + data)
            return
        if self._first:
            self._first = False
            cycle = self._cycle
            if (
                cycle.response_started
                and cycle.chunked_encoding is False
                and cycle.expected_content_length > 0
                and cycle.scope["method"] != "HEAD"
            ):
                self._head = data
                return
        self._transport.write(data)

    def close(self) -> None:
        head, self._head = self._head, None
        if head is not None and not self._transport.is_closing():
            self._transport.write(head)
        self._transport.close()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class _Refused(Exception):
    """Raised from a parser callback to stop parsing (httptools wraps it)."""


class EdgeLimitsProtocol(ReceiptTimeoutProtocol):
    max_request_head_bytes: int = 64 * 1024
    max_request_headers: int = 100
    max_request_line_bytes: int = 8 * 1024
    request_head_timeout_s: float = 10.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True
        self._head_bytes = 0
        self._header_count = 0
        self._refusal: tuple[int, str] | None = None
        self._refused = False
        self._head_timer: asyncio.TimerHandle | None = None
        self._receiving = False  # a request begun and not yet whole
        # When this connection, idle since its last answer, is closed; None while a request is
        # under way (any byte received). The timer, uvicorn's `timeout_keep_alive_task`, may
        # be due earlier: it then re-arms for this.
        self._idle_until: float | None = None

    # -- the head's clock ------------------------------------------------------------------

    def _arm_head_timer(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(
                self.request_head_timeout_s, self._head_timed_out
            )

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self._in_head and not self.transport.is_closing():
            log.debug("closing a connection whose request head did not arrive in time")
            self.transport.close()

    # -- the keep-alive clock -----------------------------------------------------------------

    def on_response_complete(self) -> None:
        # uvicorn's, with the keep-alive timer armed only when none is (see the module's doc).
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self.flow.resume_reading()
        if self.pipeline:
            self._idle_until = None
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
            return
        self._idle_until = until = self.loop.time() + self.timeout_keep_alive
        if self.timeout_keep_alive_task is None:
            self.timeout_keep_alive_task = self.loop.call_at(until, self._keep_alive_due)

    def _keep_alive_due(self) -> None:
        self.timeout_keep_alive_task = None
        until = self._idle_until
        if until is None:
            return  # a request is under way: its answer arms the clock again
        if self.loop.time() < until:  # answers since the timer was armed: the rest of the wait
            self.timeout_keep_alive_task = self.loop.call_at(until, self._keep_alive_due)
            return
        self.timeout_keep_alive_handler()

    # -- protocol ----------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        self._unset_keepalive_if_required()  # uvicorn's cancels it only on a clean close
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # lingering after a refusal: read and drop, so the client sees the answer
        # uvicorn's own data_received, with the head counted and refusals answered, and the
        # keep-alive clock stopped lazily (_keep_alive_due).
        self._idle_until = None
        if self._in_head:
            self._head_bytes += len(data)
        try:
            self.parser.feed_data(data)
            self._arm_for_the_rest()
        except httptools.HttpParserUpgrade:
            self._arm_for_the_rest()
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        except httptools.HttpParserError:
            if self._refusal is not None:
                self._refuse(*self._refusal)
            else:
                log.debug("invalid HTTP request received")
                self._refuse(400, "invalid HTTP request: malformed request line or header field")
            return
        # Checked after the feed: a head that completed inside this read is within bounds.
        if self._in_head and self._head_bytes > self.max_request_head_bytes:
            self._refuse(431, "request head too large")

    def _arm_for_the_rest(self) -> None:
        """After a read: the clocks of a request that did not arrive whole in it (most arrive
        in one read, and would arm and cancel two timers for nothing)."""
        if self._receiving:
            self._arm_receipt_timer()
            if self._in_head:
                self._arm_head_timer()

    def on_message_begin(self) -> None:
        # Not super(): ReceiptTimeoutProtocol's would arm the receipt timer now; it is armed
        # after the read instead (_arm_for_the_rest), the head's clock likewise. The delay is
        # the rest of this read's parsing, microseconds.
        HttpToolsProtocol.on_message_begin(self)
        self._receiving = True

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        if len(self.url) > self.max_request_line_bytes:
            self._refusal = (414, "request target too long")
            raise _Refused

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        if self._header_count > self.max_request_headers:
            self._refusal = (431, "too many header fields")
            raise _Refused
        # uvicorn's on_header, inlined (called per header field of every request).
        name = name.lower()
        # llhttp keeps trailing OWS, which RFC 9110 section 5.5 excludes from the value.
        value = value.rstrip(b" \t")
        if name == b"expect" and value.lower() == b"100-continue":
            self.expect_100_continue = True
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._disarm_head_timer()
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and cycle.transport is self.transport:  # a cycle made just now
            cycle.transport = _HeldHead(self.transport, cycle)  # type: ignore[assignment]

    def on_message_complete(self) -> None:
        self._receiving = False
        super().on_message_complete()
        # What arrives next on this connection is the next request's head.
        self._in_head = True
        self._head_bytes = 0
        self._header_count = 0

    def _refuse(self, status: int, message: str) -> None:
        if self._refused or self.transport.is_closing():
            return
        self._refused = True
        self._disarm_head_timer()
        self._disarm_receipt_timer()
        log.debug("refusing a request: %s", message)
        body = orjson.dumps(
            problems.problem_body(
                status,
                code=_CODES[status],
                title=_REASONS[status].decode(),
                detail=message,
                error_type="invalid_request_error",
            )
        )
        self.transport.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\n"
            b"content-length: %d\r\nconnection: close\r\n\r\n%s"
            % (status, _REASONS[status], problems.MEDIA_TYPE.encode(), len(body), body)
        )
        # Closing with unread bytes would reset the connection and lose the answer: send it,
        # then read and drop what still comes, for a moment (nginx's lingering close).
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_S, self.transport.close)


def protocol_class(settings: Settings) -> type[EdgeLimitsProtocol]:
    """The uvicorn `http=` protocol class with the settings' bounds."""
    return type(
        "JobgateHttpProtocol",
        (EdgeLimitsProtocol,),
        {
            "receipt_timeout_s": settings.request_receipt_timeout_s,
            "request_head_timeout_s": settings.request_head_timeout_s,
            "max_request_head_bytes": settings.max_request_head_bytes,
            "max_request_headers": settings.max_request_headers,
            "max_request_line_bytes": settings.max_request_line_bytes,
        },
    )
