"""Verify a jobgate webhook (Standard Webhooks) on the receiving side. Standard library only:
this module ships with the client SDK and imports nothing else from jobgate."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from typing import Any

__all__ = ["WebhookVerificationError", "verify_webhook"]


class WebhookVerificationError(ValueError):
    """The webhook is not authentic, or too old or too far in the future to trust."""


def verify_webhook(
    body: bytes | str,
    headers: Mapping[str, str],
    secret: str,
    tolerance_s: int = 300,
) -> Any:
    """Check a webhook's signature and timestamp, then return its parsed JSON payload.

    `body` must be the raw request body exactly as received (bytes preferred: re-encoding
    parsed JSON changes it). `headers` is any mapping of the request's headers; names are
    matched case-insensitively. `secret` is the endpoint's `whsec_...` secret. The
    `webhook-timestamp` must lie within `tolerance_s` seconds of now in either direction.
    Every `v1,` entry of `webhook-signature` is compared in constant time; one match is enough
    (during a secret rotation jobgate sends one signature per secret).

    Raises WebhookVerificationError. Deduplicate on the `webhook-id` header (also the
    payload's `id`): delivery is at-least-once, so the same event may arrive more than once.
    """
    raw = body.encode() if isinstance(body, str) else bytes(body)
    lowered = {str(name).lower(): str(value) for name, value in headers.items()}
    msg_id = lowered.get("webhook-id")
    timestamp = lowered.get("webhook-timestamp")
    signatures = lowered.get("webhook-signature")
    if not msg_id or not timestamp or not signatures:
        raise WebhookVerificationError(
            "missing webhook-id, webhook-timestamp or webhook-signature header"
        )
    try:
        sent_at = int(timestamp)
    except ValueError:
        raise WebhookVerificationError("webhook-timestamp is not an integer") from None
    now = int(time.time())  # noqa: TID251 (the client SDK cannot use the server's clock)
    if sent_at < now - tolerance_s:
        raise WebhookVerificationError("webhook timestamp is too old")
    if sent_at > now + tolerance_s:
        raise WebhookVerificationError("webhook timestamp is too far in the future")
    try:
        key = base64.b64decode(secret.removeprefix("whsec_"), validate=True)
    except (binascii.Error, ValueError):
        raise WebhookVerificationError("the secret is not 'whsec_' followed by base64") from None
    signed = msg_id.encode() + b"." + timestamp.encode() + b"." + raw
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest())
    matched = False
    for entry in signatures.split():
        version, _, signature = entry.partition(",")
        if version == "v1" and hmac.compare_digest(expected, signature.encode()):
            matched = True  # keep comparing: the time taken does not say which entry matched
    if not matched:
        raise WebhookVerificationError("no signature matches")
    try:
        return json.loads(raw)
    except ValueError:
        raise WebhookVerificationError("the body is not JSON") from None
