"""Text PostgreSQL cannot hold, stored exactly: its `text` and `jsonb` refuse U+0000, which a
model may emit. Such text is written with U+0000 as ESC "0" and ESC itself as ESC ESC, where
ESC is U+FFFF (a noncharacter: no provider text carries it in practice, and one that does is
escaped too), and read back as it was sent. Text without either character, nearly all of it,
is stored unchanged, so the check costs one scan for each and the read one scan for ESC.

Both stores escape a chunk of output alike (so that `length()` agrees); only PostgreSQL
escapes JSON (SQLite stores JSON as text, where `\\u0000` is plain ASCII).

A lone UTF-16 surrogate is the one string no store can hold: a provider's JSON may carry one
as an escape (`"\\ud800"`), Python's json module decodes it as it is, and UTF-8 cannot write
it. Both stores write it as U+FFFD, the replacement character (`json_dumps`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import orjson

ESC = "\uffff"
_NUL = "\x00"
_ESCAPED = re.compile(ESC + "(.)", re.DOTALL)
_JSON_NUL = b"\\u0000"  # how orjson writes U+0000 inside a JSON string
_JSON_ESC = ESC.encode()  # orjson writes U+FFFF as its UTF-8 bytes
_SURROGATE = re.compile("[\ud800-\udfff]")


def escape(text: str) -> str:
    """`text` as a column that refuses U+0000 can hold it."""
    if _NUL not in text and ESC not in text:
        return text
    return text.replace(ESC, ESC + ESC).replace(_NUL, ESC + "0")


def unescape(text: str) -> str:
    """What `escape` was given."""
    if ESC not in text:
        return text
    return _ESCAPED.sub(_unescape_one, text)


def _unescape_one(match: re.Match[str]) -> str:
    return _NUL if match.group(1) == "0" else match.group(1)


def json_needs_escape(encoded: bytes) -> bool:
    """Whether JSON written by orjson holds a string `escape` would change."""
    return _JSON_NUL in encoded or _JSON_ESC in encoded


def escape_json(value: Any) -> Any:
    """`value` with every string (member names too) escaped."""
    return _map_strings(value, escape)


def unescape_json(value: Any) -> Any:
    """What `escape_json` was given."""
    return _map_strings(value, unescape)


def json_dumps(value: Any) -> bytes:
    """`value` as JSON (orjson), every lone surrogate written as U+FFFD."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:  # a lone surrogate; anything else fails again below
        return orjson.dumps(_map_strings(value, _without_surrogates))


def _without_surrogates(text: str) -> str:
    return _SURROGATE.sub("\ufffd", text)


def _map_strings(value: Any, change: Callable[[str], str]) -> Any:
    """`value` with `change` applied to every string, member names included."""
    if isinstance(value, str):
        return change(value)
    if isinstance(value, dict):
        return {change(key): _map_strings(item, change) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_map_strings(item, change) for item in value]
    return value
