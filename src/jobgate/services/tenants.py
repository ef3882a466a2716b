"""Tenants and their API keys. Keys are shown once and stored only as a SHA-256 hash."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import secrets
import time

from jobgate import errors
from jobgate.ids import IdGenerator
from jobgate.storage.protocol import Storage
from jobgate.storage.records import Tenant

KEY_PREFIX = "jg_"
DEFAULT_TENANT = "default"
_AUTH_CACHE_TTL_S = 5.0


def new_api_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(key: str) -> str:
    # Keys are 256 random bits: a fast hash is enough (no dictionary to defend against).
    return hashlib.sha256(key.encode()).hexdigest()


def new_webhook_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


@dataclasses.dataclass(frozen=True, slots=True)
class IssuedKey:
    tenant: Tenant
    key_id: str
    api_key: str  # shown once


class TenantService:
    def __init__(self, *, storage: Storage, ids: IdGenerator) -> None:
        self.storage = storage
        self.ids = ids
        self._cache: dict[str, tuple[float, Tenant | None]] = {}

    async def create(self, name: str) -> IssuedKey:
        if not name or len(name) > 64 or not all(c.isalnum() or c in "-_." for c in name):
            raise errors.InvalidRequest(
                "tenant names are 1-64 letters, digits, '-', '_' or '.'", param="name"
            )
        tenant = await self.storage.tenant_create(
            tenant_id=self.ids.new("ten"), name=name, webhook_secret=new_webhook_secret()
        )
        return await self.issue_key(tenant)

    async def issue_key(self, tenant: Tenant) -> IssuedKey:
        key = new_api_key()
        record = await self.storage.api_key_create(
            key_id=self.ids.new("key"),
            tenant_id=tenant.id,
            key_hash=hash_key(key),
            key_prefix=key[:10],
        )
        return IssuedKey(tenant, record.id, key)

    async def ensure_default(self) -> IssuedKey | None:
        """Create the `default` tenant on first start; its key is returned only then."""
        if await self.storage.tenant_get(name=DEFAULT_TENANT) is not None:
            return None
        try:
            return await self.create(DEFAULT_TENANT)
        except errors.Conflict:
            return None  # another process created it first

    async def authenticate(self, key: str) -> Tenant:
        """The tenant owning `key`; errors.Unauthorized otherwise. Answers are cached for a
        few seconds, so a revoked key stops working within that time."""
        digest = hash_key(key)
        now = time.monotonic()
        cached = self._cache.get(digest)
        if cached is not None and now - cached[0] < _AUTH_CACHE_TTL_S:
            tenant = cached[1]
        else:
            tenant = await self.storage.api_key_tenant(key_hash=digest)
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[digest] = (now, tenant)
        if tenant is None:
            raise errors.Unauthorized("invalid API key")
        return tenant
