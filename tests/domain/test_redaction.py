"""The console shows a request's shape, never its text, unless the operator allows it."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from jobgate.domain.redaction import shape

SECRET = "tell me the launch codes"
KEYS = ["content", "text", "input", "prompt", "x"]


def test_shape_hides_every_message_text_and_keeps_the_structure() -> None:
    request = {
        "model": "gpt-4o",
        "temperature": 0.2,
        "messages": [
            {"role": "system", "content": SECRET},
            {"role": "user", "content": [{"type": "text", "text": SECRET}]},
        ],
        "tools": [{"type": "function", "function": {"name": "x", "description": SECRET}}],
        "metadata": {"id": SECRET * 20},
    }
    shown = shape(request)
    assert SECRET not in json.dumps(shown)
    assert shown["model"] == "gpt-4o" and shown["temperature"] == 0.2
    assert shown["messages"][0] == {"role": "system", "content": f"[{len(SECRET)} chars]"}
    assert shown["messages"][1]["content"][0]["type"] == "text"
    assert shape(request, show_content=True) == request


@given(
    st.recursive(
        st.text(min_size=1),
        lambda inner: (
            st.lists(inner)
            | st.dictionaries(st.sampled_from(["content", "text", "input", "prompt", "x"]), inner)
        ),
    )
)
def test_no_text_outside_the_named_keys_survives(value: object) -> None:
    text = json.dumps(shape(value), ensure_ascii=False)
    strings: list[str] = []

    def collect(v: object) -> None:
        if isinstance(v, str):
            strings.append(v)
        elif isinstance(v, list):
            for item in v:
                collect(item)
        elif isinstance(v, dict):
            for item in v.values():
                collect(item)

    collect(value)
    for s in strings:
        if s not in KEYS and "[" not in s and "chars]" not in s:
            assert json.dumps(s, ensure_ascii=False) not in text
