"""wire.response_items: a create's input and a Response's output as conversation items, and the
request a provider receives for a response that continues earlier turns."""

from __future__ import annotations

import itertools
from typing import Any

from jobgate.wire import response_items


def _ids() -> response_items.NewId:
    count = itertools.count(1)
    return lambda prefix: f"{prefix}_{next(count)}"


def test_a_string_input_is_one_user_message_with_a_text_part() -> None:
    assert response_items.as_items("hi", _ids()) == [
        {
            "id": "msg_1",
            "type": "message",
            "role": "user",
            "status": "completed",
            "content": [{"type": "input_text", "text": "hi"}],
        }
    ]


def test_items_keep_their_ids_and_get_what_they_lack() -> None:
    given: list[Any] = [
        {"role": "assistant", "content": "said"},
        {"type": "function_call", "id": "fc_x", "call_id": "c", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": "42", "status": "bogus"},
        "not an item",
    ]
    items = response_items.as_items(given, _ids())
    assert [item["id"] for item in items] == ["msg_1", "fc_x", "fco_2"]
    assert items[0]["content"] == [{"type": "output_text", "text": "said", "annotations": []}]
    assert all(item["status"] == "completed" for item in items)
    assert given[0] == {"role": "assistant", "content": "said"}  # left as it was


def test_a_provider_receives_the_context_before_the_input_and_no_member_of_jobgate() -> None:
    earlier: list[dict[str, Any]] = [
        {"id": "msg_1", "type": "message", "role": "user", "content": "one"},
        {"id": "rs_1", "type": "reasoning", "summary": []},  # no encrypted_content: not sent
        {"id": "rs_2", "type": "reasoning", "summary": [], "encrypted_content": "sealed"},
    ]
    stored = response_items.with_context(
        {"model": "m", "input": "two", "previous_response_id": "resp_1"}, earlier, ["resp_1"]
    )
    assert response_items.context_of(stored) == (earlier, ["resp_1"])
    sent = response_items.upstream(stored)
    assert sent == {
        "model": "m",
        "input": [earlier[0], earlier[2], {"type": "message", "role": "user", "content": "two"}],
    }


def test_a_request_without_context_goes_as_it_is() -> None:
    assert response_items.upstream({"model": "m", "input": "x"}) == {"model": "m", "input": "x"}
    assert response_items.context_of({"jobgate_context": "damaged"}) == ([], [])
