"""Idempotency keys: validation and the canonical hash a key is bound to."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

MAX_KEY_LENGTH = 255


def key_is_valid(key: str) -> bool:
    """1-255 printable ASCII characters (space through tilde)."""
    return 0 < len(key) <= MAX_KEY_LENGTH and all(" " <= ch <= "~" for ch in key)


def body_hash(body: Any) -> str:
    """SHA-256 of the canonical JSON of a parsed body: key order and whitespace do not matter."""
    canonical = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(canonical).hexdigest()
