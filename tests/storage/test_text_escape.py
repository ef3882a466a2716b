"""Text a column cannot hold (U+0000 on PostgreSQL), escaped on the way in and read back exactly:
any string and any JSON value round-trip, and text without the two special characters is
stored unchanged."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from jobgate.storage import text_escape

# Text rich in the characters that matter: NUL, the escape character and what follows it.
SPECIAL = st.sampled_from(["\x00", text_escape.ESC, "0", "\\", "u"])
TEXT = st.lists(st.one_of(SPECIAL, st.characters(codec="utf-8")), max_size=40).map("".join)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)


@given(TEXT)
def test_any_text_round_trips_without_a_nul(text: str) -> None:
    stored = text_escape.escape(text)
    assert "\x00" not in stored
    assert text_escape.unescape(stored) == text


@given(TEXT)
def test_text_without_the_special_characters_is_stored_as_it_is(text: str) -> None:
    plain = text.replace("\x00", "").replace(text_escape.ESC, "")
    assert text_escape.escape(plain) is plain and text_escape.unescape(plain) is plain


@given(JSON)
def test_any_json_round_trips_through_what_postgres_stores(value: Any) -> None:
    encoded = orjson.dumps(value)
    if text_escape.json_needs_escape(encoded):
        encoded = orjson.dumps(text_escape.escape_json(value))
    assert b"\\u0000" not in encoded  # jsonb accepts it
    raw = encoded.decode()
    decoded = orjson.loads(raw)
    if text_escape.ESC in raw:
        decoded = text_escape.unescape_json(decoded)
    assert decoded == value
