"""Idempotency keys: validation, the canonical hash a key is bound to, and what an insert does
with each keyed item (the one rule both stores apply)."""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Mapping, Sequence
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


class Decision(enum.Enum):
    """What an insert does with one item."""

    NEW = "new"  # insert its job (and bind its key, if it has one)
    REPLAY = "replay"  # answer the job its key is bound to; insert nothing
    CONFLICT = "conflict"  # its key is bound to another body: refuse it; insert nothing


# A key is bound per tenant and route: (tenant_id, route, key).
Scope = tuple[str, str, str]


def decide(uses: Sequence[tuple[Scope, str] | None], bound: Mapping[Scope, str]) -> list[Decision]:
    """The decision for each item of one insert, in order, as if each ran alone in that order.

    `uses`: per item, its key's scope and its body hash (None: no key); `bound`: the body hash
    of each live binding the insert found in place. An item without a key is new. A key not
    bound binds to the first item that uses it (new); every later use of it, and every use of
    a key already bound, replays when its body hash is the binding's and conflicts otherwise.
    A replay answers the binding's job: the one bound before the insert when its scope is in
    `bound`, else the job of the call's first item with that key."""
    bodies = dict(bound)
    decisions = []
    for use in uses:
        if use is None:
            decisions.append(Decision.NEW)
            continue
        scope, body = use
        held = bodies.get(scope)
        if held is None:
            bodies[scope] = body
            decisions.append(Decision.NEW)
        else:
            decisions.append(Decision.REPLAY if held == body else Decision.CONFLICT)
    return decisions
