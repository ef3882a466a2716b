"""Job tokens: issuing them for a tenant's job, verifying them without a read per request, and
rotating the secret that signs them (an operator's command).

Each process caches the secret's generations for a few seconds, so a rotation (or a
revocation) reaches every API process within that time, as a revoked API key does. A token
signed by a generation this process has not seen yet makes it read again, at most once a
second, so a burst of forged generations costs one read a second, not one a request.
"""

from __future__ import annotations

import base64
import dataclasses
import math
import secrets
from collections.abc import Iterable

from jobgate import errors
from jobgate.clock import Clock
from jobgate.domain import job_tokens
from jobgate.storage.protocol import JobTokenStore

# Exactly what an unknown API key answers (services.tenants): a refused token reveals nothing.
REFUSED = "invalid API key"
_REFRESH_S = 5.0  # how stale the cached generations may be
_UNKNOWN_REFRESH_S = 1.0  # how often an unknown generation may make this process read again
_ROTATE_TRIES = 5


@dataclasses.dataclass(frozen=True, slots=True)
class IssuedToken:
    token: str
    grant: job_tokens.Grant


@dataclasses.dataclass(frozen=True, slots=True)
class _Keys:
    usable: dict[int, bytes]  # generation -> secret, every generation that verifies
    current: int  # the generation that signs
    loaded_at: float  # monotonic


class JobTokenService:
    def __init__(self, *, storage: JobTokenStore, clock: Clock) -> None:
        self.storage = storage
        self.clock = clock
        self._keys: _Keys | None = None

    async def issue(
        self, *, tenant_id: str, job_id: str, ttl_s: int, scopes: Iterable[str]
    ) -> IssuedToken:
        """A token for `scopes` on the job (checked by the caller to be the tenant's), valid
        for `ttl_s` seconds (1..MAX_TTL_S) from now by this process's clock."""
        keys = await self._current_keys()
        expires_at = math.floor(self.clock.now().timestamp()) + ttl_s
        grant = job_tokens.Grant(tenant_id, job_id, frozenset(scopes), expires_at, keys.current)
        return IssuedToken(job_tokens.sign(grant, keys.usable[keys.current]), grant)

    async def verify(self, token: str, *, job_id: str, scope: str) -> job_tokens.Grant:
        """The grant of a token for `scope` on job `job_id`; errors.Unauthorized, worded as for
        an unknown API key, for anything else (a forged, tampered, expired or revoked token,
        another job, a missing scope). Reads storage only to refresh the cached secrets."""
        parts = job_tokens.split(token)
        if parts is None:
            raise errors.Unauthorized(REFUSED)
        keys = await self._keys_for(int(parts[2][1]))
        grant = job_tokens.verify(
            token,
            secrets=keys.usable,
            job_id=job_id,
            scope=scope,
            now_s=self.clock.now().timestamp(),
        )
        if grant is None:
            raise errors.Unauthorized(REFUSED)
        return grant

    async def rotate(self, *, revoke: bool) -> int:
        """Store a new generation, which signs every token from now on, and answer its number.
        `revoke`: every token issued before stops working (within the processes' cache time);
        otherwise they keep working until they expire. Generations that verify nothing any
        more are deleted."""
        for _ in range(_ROTATE_TRIES):
            generation = await self.storage.job_token_secret_rotate(
                secret=_new_secret(), revokes_older=revoke
            )
            if generation is not None:
                await self.storage.job_token_secret_prune(max_ttl_s=job_tokens.MAX_TTL_S)
                self._keys = None
                return generation
        raise errors.Conflict("another rotation of the job-token secret ran at the same time")

    async def _current_keys(self) -> _Keys:
        keys = self._keys
        if keys is None or self.clock.monotonic() - keys.loaded_at >= _REFRESH_S:
            keys = await self._load()
        return keys

    async def _keys_for(self, generation: int) -> _Keys:
        """The cached generations, read again when stale or when `generation` is newer than
        any seen (at most once a second for that reason)."""
        keys = await self._current_keys()
        unseen = generation > keys.current
        if unseen and self.clock.monotonic() - keys.loaded_at >= _UNKNOWN_REFRESH_S:
            keys = await self._load()
        return keys

    async def _load(self) -> _Keys:
        stored = await self.storage.job_token_secrets()
        if not stored:
            await self.storage.job_token_secret_first(secret=_new_secret())
            stored = await self.storage.job_token_secrets()
        oldest = job_tokens.oldest_usable((s.generation, s.revokes_older) for s in stored)
        usable = {
            s.generation: base64.b64decode(s.secret) for s in stored if s.generation >= oldest
        }
        self._keys = _Keys(usable, max(usable), self.clock.monotonic())
        return self._keys


def _new_secret() -> str:
    return base64.b64encode(secrets.token_bytes(32)).decode("ascii")
