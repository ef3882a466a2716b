"""What the console shows of a request or a result: its shape (keys, roles, models, numbers,
the length of each text), never its text, unless the operator setting allows content. Pure."""

from __future__ import annotations

from typing import Any

# String values shown as they are: they name things, they hold no user content.
SHOWN_KEYS = frozenset(
    {"model", "role", "type", "object", "status", "finish_reason", "stop_reason", "id"}
)
_MAX_SHOWN_CHARS = 200


def shape(value: Any, *, show_content: bool = False, key: str | None = None) -> Any:
    """`value` with every text replaced by `[N chars]`, except short values of SHOWN_KEYS;
    with `show_content` it is returned unchanged."""
    if show_content:
        return value
    if isinstance(value, dict):
        return {k: shape(v, key=str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(v, key=key) for v in value]
    if isinstance(value, str):
        if key in SHOWN_KEYS and len(value) <= _MAX_SHOWN_CHARS:
            return value
        return f"[{len(value)} chars]"
    return value  # numbers, booleans, null: limits and flags, not content
