"""Job tokens, the pure part: a short-lived, scoped credential for one job, signed with a server
secret so that any API process verifies it without reading the database.

A token is `jgt_<payload>.<mac>`: the payload is base64url of
`1.<generation>.<expires_at>.<scope bits>.<tenant id>.<job id>` and the mac base64url of
HMAC-SHA256 over `jgt1.<payload>` with the secret of that generation. Whatever a token fails
on (its form, an unknown generation, its mac, its expiry, another job, a missing scope),
the caller learns only that it is not a credential: the edge answers it as an unknown key.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import hmac
import re
from collections.abc import Iterable, Mapping

PREFIX = "jgt_"
SCOPES = ("read", "stream", "cancel")
DEFAULT_SCOPES = ("read", "stream")  # cancel is a write: asked for explicitly
DEFAULT_TTL_S = 3_600
MAX_TTL_S = 86_400  # a token outlives its secret's retirement by at most this
MAX_TOKEN_CHARS = 1_024  # far above any token issued (about 160 characters)
_BITS = {scope: 1 << index for index, scope in enumerate(SCOPES)}
_ALL_BITS = (1 << len(SCOPES)) - 1
_VERSION = "1"
_MAC_CONTEXT = b"jgt1."
_B64URL = re.compile(r"[A-Za-z0-9_-]+")
_DIGITS = re.compile(r"[0-9]{1,12}")
_ID = re.compile(r"[A-Za-z0-9_-]{1,255}")


@dataclasses.dataclass(frozen=True, slots=True)
class Grant:
    """What a verified token allows: `scopes` on job `job_id` of `tenant_id` until `expires_at`
    (Unix seconds, excluded)."""

    tenant_id: str
    job_id: str
    scopes: frozenset[str]
    expires_at: int
    generation: int  # of the secret that signed it


def sign(grant: Grant, secret: bytes) -> str:
    """The token of `grant`, signed with `secret` (the secret of `grant.generation`)."""
    bits = sum(_BITS[scope] for scope in grant.scopes)
    text = ".".join(
        (
            _VERSION,
            str(grant.generation),
            str(grant.expires_at),
            str(bits),
            grant.tenant_id,
            grant.job_id,
        )
    )
    payload = _encode(text.encode("ascii"))
    return f"{PREFIX}{payload}.{_mac(secret, payload)}"


def verify(
    token: str, *, secrets: Mapping[int, bytes], job_id: str, scope: str, now_s: float
) -> Grant | None:
    """The grant of `token` if it is a job token signed by one of `secrets` (by generation),
    unexpired at `now_s`, for job `job_id` and carrying `scope`; None otherwise."""
    grant = signed_grant(token, secrets)
    if grant is None or now_s >= grant.expires_at:
        return None
    if grant.job_id != job_id or scope not in grant.scopes:
        return None
    return grant


def signed_grant(token: str, secrets: Mapping[int, bytes]) -> Grant | None:
    """The grant `token` carries if one of `secrets` signed it exactly as written; expiry, job
    and scope unchecked."""
    parts = split(token)
    if parts is None:
        return None
    payload, mac, fields = parts
    secret = secrets.get(int(fields[1]))
    if secret is None:
        return None
    if not hmac.compare_digest(mac.encode("ascii"), _mac(secret, payload).encode("ascii")):
        return None
    bits = int(fields[3])
    if not 0 < bits <= _ALL_BITS:
        return None
    scopes = frozenset(scope for scope, bit in _BITS.items() if bits & bit)
    return Grant(fields[4], fields[5], scopes, int(fields[2]), int(fields[1]))


def split(token: str) -> tuple[str, str, list[str]] | None:
    """(payload, mac, payload fields) of a token of the right form; None otherwise. The
    generation, expiry and scope bits are digits; the ids have the form of object ids."""
    if len(token) > MAX_TOKEN_CHARS or not token.startswith(PREFIX):
        return None
    payload, dot, mac = token[len(PREFIX) :].partition(".")
    if not dot or not _B64URL.fullmatch(payload) or not _B64URL.fullmatch(mac):
        return None
    text = _decode(payload)
    if text is None:
        return None
    fields = text.split(".")
    if len(fields) != 6 or fields[0] != _VERSION:
        return None
    if not all(_DIGITS.fullmatch(field) for field in fields[1:4]):
        return None
    if not (_ID.fullmatch(fields[4]) and _ID.fullmatch(fields[5])):
        return None
    return payload, mac, fields


def oldest_usable(generations: Iterable[tuple[int, bool]]) -> int:
    """The oldest secret generation that still verifies tokens, of (generation, revokes_older)
    pairs: a rotation that revoked its elders voids every token they signed; a rotation that
    did not leaves them to expire by themselves (at most MAX_TTL_S later)."""
    return max((generation for generation, revokes in generations if revokes), default=0)


def ordered(scopes: Iterable[str]) -> list[str]:
    """`scopes` once each, in SCOPES' order (how a token's scopes are shown)."""
    held = set(scopes)
    return [scope for scope in SCOPES if scope in held]


def _mac(secret: bytes, payload: str) -> str:
    digest = hmac.new(secret, _MAC_CONTEXT + payload.encode("ascii"), hashlib.sha256).digest()
    return _encode(digest)


def _encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _decode(text: str) -> str | None:
    """The ASCII text `text` (unpadded base64url) encodes; None for anything else. Another
    spelling of the same bytes decodes alike, but the mac covers the payload as written."""
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode("ascii")
    except (binascii.Error, ValueError):
        return None
