"""Operators: people who see every tenant (the dashboard). Keys are shown once, stored hashed."""

from __future__ import annotations

import secrets

from jobgate import errors
from jobgate.ids import IdGenerator
from jobgate.services.tenants import hash_key
from jobgate.storage.protocol import Storage

KEY_PREFIX = "jgo_"


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
