"""Standard Webhooks signatures (the scheme OpenAI's webhooks use): HMAC-SHA256 over
`{webhook-id}.{webhook-timestamp}.{raw body}` with the bytes of a `whsec_…` secret, sent as
`webhook-signature: v1,<base64>` (several space-separated entries during a secret rotation).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping

TOLERANCE_S = 300


class SignatureError(ValueError):
    """The signature, its headers or its timestamp do not check out (the reason says which)."""


def secret_bytes(secret: str) -> bytes:
    """The HMAC key of a secret: base64 after `whsec_`, else the text itself (as OpenAI's
    SDK treats a secret without the prefix)."""
    if secret.startswith("whsec_"):
        try:
            return base64.b64decode(secret.removeprefix("whsec_"), validate=True)
        except (binascii.Error, ValueError) as exc:
            raise SignatureError("the webhook secret is not valid base64 after whsec_") from exc
    return secret.encode()


def _mac(secret: str, webhook_id: str, timestamp: str, body: bytes) -> bytes:
    signed = f"{webhook_id}.{timestamp}.".encode() + body
    return base64.b64encode(hmac.new(secret_bytes(secret), signed, hashlib.sha256).digest())


def sign(secret: str, webhook_id: str, timestamp: int, body: bytes) -> str:
    """The `webhook-signature` header value for one delivery."""
    return "v1," + _mac(secret, webhook_id, str(timestamp), body).decode()


def headers_for(secret: str, webhook_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    return {
        "webhook-id": webhook_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign(secret, webhook_id, timestamp, body),
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
    webhook-id. Raises SignatureError. Comparison is constant-time."""
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
