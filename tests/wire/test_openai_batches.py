"""A batch input line at the edge (wire.openai_batches.parse_line): the checker refuses
anything that is not a usable request with a LineError naming the line, never another
exception."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from jobgate.wire import openai_batches as batches

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(raw=st.binary(max_size=200) | json_values.map(lambda v: orjson.dumps(v)))
def test_any_line_is_accepted_or_refused_with_its_number(raw: bytes) -> None:
    try:
        value = batches.parse_line(raw, 7)
    except batches.LineError as exc:
        assert exc.line == 7 and "line 7" in exc.message
        return
    assert set(value) == {"custom_id", "method", "url", "body"}
    assert value["url"] in batches.ENDPOINTS and isinstance(value["body"], dict)
