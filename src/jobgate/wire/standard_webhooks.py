"""Standard Webhooks signatures, the one implementation for both directions: the webhooks
jobgate sends, the provider webhooks it verifies (OpenAI's scheme is this one) and those the
simulator sends. HMAC-SHA256 over `{webhook-id}.{webhook-timestamp}.{raw body}` keyed by the
bytes of the secret, sent as `webhook-signature: v1,<base64>` (several space-separated entries
during a secret rotation)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping, Sequence

TOLERANCE_S = 300  # a delivery whose timestamp is further from now is refused (replays)


class SignatureError(ValueError):
    """The secret, the signature, its headers or its timestamp do not check out (the reason
    says which)."""


def secret_bytes(secret: str) -> bytes:
    """The HMAC key of a secret: the base64 after `whsec_` (the spec's form, which every
    secret jobgate issues takes), else the text itself, as OpenAI's SDK reads a secret without
    the prefix (the Standard Webhooks reference libraries would decode it as base64: such a
    secret is only ever a provider's, checked the provider's way)."""
    if not secret.startswith("whsec_"):
        return secret.encode()
    try:
        return base64.b64decode(secret.removeprefix("whsec_"), validate=True)
    except (binascii.Error, ValueError):
        raise SignatureError("a webhook secret is 'whsec_' followed by base64") from None


def _mac(secret: str, webhook_id: str, timestamp: str, body: bytes) -> bytes:
    signed = f"{webhook_id}.{timestamp}.".encode() + body
    return base64.b64encode(hmac.new(secret_bytes(secret), signed, hashlib.sha256).digest())


def sign(secret: str, webhook_id: str, timestamp: int, body: bytes) -> str:
    """One `v1,<base64 HMAC-SHA256>` entry of the `webhook-signature` header."""
    return "v1," + _mac(secret, webhook_id, str(timestamp), body).decode()


def signed_headers(
    secrets: Sequence[str], webhook_id: str, timestamp: int, body: bytes
) -> dict[str, str]:
    """The Standard Webhooks headers of one delivery: one signature per secret (two during a
    rotation)."""
    if not secrets:
        raise ValueError("no secret to sign with")
    return {
        "webhook-id": webhook_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": " ".join(sign(s, webhook_id, timestamp, body) for s in secrets),
    }


def verify(
    secret: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    now_s: float,
    tolerance_s: int = TOLERANCE_S,
) -> str:
    """Check a delivery over its raw bytes, before anything parses them; return its
    webhook-id. Raises SignatureError. The comparison is constant-time."""
    webhook_id = headers.get("webhook-id")
    timestamp = headers.get("webhook-timestamp")
    signature = headers.get("webhook-signature")
    if not webhook_id or not timestamp or not signature:
        raise SignatureError("missing webhook-id, webhook-timestamp or webhook-signature")
    try:
        sent_at = int(timestamp)
    except ValueError:
        raise SignatureError("webhook-timestamp is not an integer") from None
    if abs(now_s - sent_at) > tolerance_s:
        raise SignatureError(f"webhook-timestamp is outside the {tolerance_s} s window")
    expected = _mac(secret, webhook_id, timestamp, body)
    offered = [
        entry.split(",", 1)[1].encode()
        for entry in signature.split()
        if entry.startswith("v1,") and "," in entry
    ]
    if not any(hmac.compare_digest(expected, candidate) for candidate in offered):
        raise SignatureError("no signature matches")
    return webhook_id
