"""Operators: people who see every tenant (the dashboard). Keys are shown once, stored hashed;
a dashboard sign-in opens a server-side session whose random id is all the browser keeps."""

from __future__ import annotations

import secrets

from jobgate import errors
from jobgate.ids import IdGenerator
from jobgate.services.tenants import hash_key
from jobgate.storage.protocol import Storage

KEY_PREFIX = "jgo_"
SESSION_PREFIX = "jgs_"


class OperatorService:
    def __init__(self, *, storage: Storage, ids: IdGenerator) -> None:
        self.storage = storage
        self.ids = ids

    async def create(self, name: str) -> str:
        """A new operator key for `name` (returned once)."""
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        await self.storage.operator_key_create(
            key_id=self.ids.new("opk"), name=name, key_hash=hash_key(key), key_prefix=key[:10]
        )
        return key

    async def ensure_first(self) -> str | None:
        """On a fresh install, the first operator key (returned only then)."""
        if await self.storage.operator_key_count() > 0:
            return None
        return await self.create("admin")

    async def authenticate(self, key: str) -> str:
        """The operator's name; errors.Unauthorized unless the key is a live operator key."""
        if not key.startswith(KEY_PREFIX):
            raise errors.Unauthorized("not an operator key")
        name = await self.storage.operator_key_name(key_hash=hash_key(key))
        if name is None:
            raise errors.Unauthorized("invalid operator key")
        return name

    async def sign_in(self, key: str, *, ttl_s: float) -> tuple[str, str]:
        """A new dashboard session for a live operator key: (session id, operator name). The
        id is returned once; only its hash is stored. errors.Unauthorized for any other key."""
        if not key.startswith(KEY_PREFIX):
            raise errors.Unauthorized("not an operator key")
        session_id = SESSION_PREFIX + secrets.token_urlsafe(32)
        name = await self.storage.dashboard_session_create(
            id_hash=hash_key(session_id), key_hash=hash_key(key), ttl_s=ttl_s
        )
        if name is None:
            raise errors.Unauthorized("invalid operator key")
        return session_id, name

    async def session_operator(self, session_id: str) -> str:
        """The operator of a live session; errors.Unauthorized if it expired, was signed out
        or its key was revoked."""
        if not session_id.startswith(SESSION_PREFIX) or len(session_id) > 128:
            raise errors.Unauthorized("not a dashboard session")
        name = await self.storage.dashboard_session_operator(id_hash=hash_key(session_id))
        if name is None:
            raise errors.Unauthorized("dashboard session ended")
        return name

    async def sign_out(self, session_id: str) -> None:
        """End a session (idempotent)."""
        if session_id.startswith(SESSION_PREFIX) and len(session_id) <= 128:
            await self.storage.dashboard_session_delete(id_hash=hash_key(session_id))
