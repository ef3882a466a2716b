"""Dashboard sessions (a part of the Storage contract): server-side sign-ins, so that the
browser's cookie holds a random session id and never an operator key."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol


class SessionStore(Protocol):
    async def dashboard_session_create(
        self, *, id_hash: str, key_hash: str, ttl_s: float, now: datetime | None = None
    ) -> str | None:
        """Open a session lasting `ttl_s` for the live operator key with this hash, and forget
        expired sessions; the operator's name, or None (nothing stored) if the key is not
        live. Stores the session id's hash only."""
        ...

    async def dashboard_session_operator(
        self, *, id_hash: str, now: datetime | None = None
    ) -> str | None:
        """The operator of the session with this id hash, while it is unexpired and its key
        is not revoked; else None."""
        ...

    async def dashboard_session_delete(self, *, id_hash: str) -> None:
        """End a session (sign-out). Idempotent."""
        ...
