"""Text PostgreSQL cannot hold, stored exactly: its `text` and `jsonb` refuse U+0000, which a
model may emit. Such text is written with U+0000 as ESC "0" and ESC itself as ESC ESC, where
ESC is U+FFFF (a noncharacter: no provider text carries it in practice, and one that does is
escaped too), and read back as it was sent. Text without either character, nearly all of it,
is stored unchanged, so the check costs one scan for each and the read one scan for ESC.

Both stores escape a chunk of output alike (so that `length()` agrees); only PostgreSQL
escapes JSON (SQLite stores JSON as text, where `\\u0000` is plain ASCII).
"""

from __future__ import annotations

import re
from typing import Any

ESC = "\uffff"
_NUL = "\x00"
_ESCAPED = re.compile(ESC + "(.)", re.DOTALL)
_JSON_NUL = b"\\u0000"  # how orjson writes U+0000 inside a JSON string
_JSON_ESC = ESC.encode()  # orjson writes U+FFFF as its UTF-8 bytes


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
    if isinstance(value, str):
        return escape(value)
    if isinstance(value, dict):
        return {escape(key): escape_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [escape_json(item) for item in value]
    return value


def unescape_json(value: Any) -> Any:
    """What `escape_json` was given."""
    if isinstance(value, str):
        return unescape(value)
    if isinstance(value, dict):
        return {unescape(key): unescape_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [unescape_json(item) for item in value]
    return value
