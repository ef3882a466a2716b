"""Bound the time a client may take to deliver a request (a slow-header / slow-body client
must not hold a connection forever: uvicorn itself only times out idle keep-alive connections).

The clock starts when the connection opens (or, on a kept-alive connection, when the next
request's first byte arrives) and stops when the whole request, head and body, has arrived.
When it runs out the connection is closed; the app, if it was reading the body, sees a
disconnect. Handlers are never limited: only the receipt of the request is.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger(__name__)


class ReceiptTimeoutProtocol(HttpToolsProtocol):
    receipt_timeout_s: float = 60.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._receipt_timer: asyncio.TimerHandle | None = None

    def _arm_receipt_timer(self) -> None:
        if self._receipt_timer is None:
            self._receipt_timer = self.loop.call_later(
                self.receipt_timeout_s, self._receipt_timed_out
            )

    def _disarm_receipt_timer(self) -> None:
        if self._receipt_timer is not None:
            self._receipt_timer.cancel()
            self._receipt_timer = None

    def _receipt_timed_out(self) -> None:
        self._receipt_timer = None
        if not self.transport.is_closing():
            log.debug("closing a connection that did not deliver its request in time")
            self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_receipt_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_receipt_timer()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm_receipt_timer()

    def on_message_complete(self) -> None:
        self._disarm_receipt_timer()
        super().on_message_complete()
