"""Continue on retry, the pure rules: which jobs may ask for it, the prefix a continuing
attempt sends, its answer put back together, and the cut attempt's usage."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobgate import errors
from jobgate.domain import on_retry
from jobgate.simulator import model
from jobgate.wire import anthropic_requests, sim

CHAT = "/v1/chat/completions"


@pytest.mark.parametrize("endpoint", sorted(on_retry.ENDPOINTS))
@pytest.mark.parametrize("choice", on_retry.CHOICES)
def test_streaming_chat_responses_and_messages_jobs_may_choose(endpoint: str, choice: str) -> None:
    on_retry.check_option(choice, stream=True, endpoint=endpoint)
    on_retry.check_option(None, stream=False, endpoint="/v1/embeddings")


@pytest.mark.parametrize(
    ("choice", "stream", "endpoint", "says"),
    [
        ("continue", False, CHAT, "streaming jobs only"),
        ("restart", False, CHAT, "streaming jobs only"),
        ("continue", True, "/v1/embeddings", "'/v1/embeddings'"),
        ("resume", True, CHAT, "one of continue, restart"),
    ],
)
def test_any_other_job_is_refused_naming_the_option(
    choice: str, stream: bool, endpoint: str, says: str
) -> None:
    with pytest.raises(errors.InvalidRequest) as refused:
        on_retry.check_option(choice, stream=stream, endpoint=endpoint)
    assert refused.value.param == "on_retry"
    assert says in refused.value.message


def test_only_a_stored_continue_continues() -> None:
    assert on_retry.wants_continue({"on_retry": "continue"})
    assert not on_retry.wants_continue({"on_retry": "restart"})
    assert not on_retry.wants_continue({})
    assert not on_retry.wants_continue(None)


def test_the_prefix_is_a_trailing_assistant_message_without_trailing_whitespace() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    prefix = on_retry.kept_prefix("Hello, wor \n\t")
    assert prefix == "Hello, wor"
    sent = on_retry.with_prefix(body, prefix)
    assert sent["messages"] == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Hello, wor"},
    ]
    assert body["messages"] == [{"role": "user", "content": "hi"}]  # not changed in place


def test_a_chat_answer_gets_the_prefix_back_in_front() -> None:
    body = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "ld"}}]}
    joined = on_retry.joined(body, "Hello, wor")
    assert joined["choices"][0]["message"] == {"role": "assistant", "content": "Hello, world"}
    empty = {"choices": [{"index": 0, "message": {"role": "assistant", "content": None}}]}
    assert on_retry.joined(empty, "Hi")["choices"][0]["message"]["content"] == "Hi"


def test_a_messages_answer_gets_the_prefix_in_its_first_text_block() -> None:
    tool = {"type": "tool_use", "id": "t", "name": "f", "input": {}}
    body = {"content": [tool, {"type": "text", "text": "ld"}]}
    assert on_retry.joined(body, "wor")["content"] == [tool, {"type": "text", "text": "world"}]
    bare = {"content": [tool]}
    assert on_retry.joined(bare, "wor")["content"] == [{"type": "text", "text": "wor"}, tool]


def test_the_cut_attempt_read_the_prompt_and_wrote_the_prefix() -> None:
    assert on_retry.cut_attempt_usage(12, "x" * 9) == (9, 3)  # 9 chars: 3 tokens
    assert on_retry.cut_attempt_usage(1, "x" * 40) == (0, 10)  # never below zero


@given(
    prompt=st.text(max_size=60),
    cut=st.floats(min_value=0, max_value=1, allow_nan=False),
)
def test_the_simulator_continues_to_exactly_the_uncut_answer(prompt: str, cut: float) -> None:
    messages = [{"role": "user", "content": prompt}]
    whole = model.chat_completion({"model": "sim-echo", "messages": messages}, created=0)
    text = whole["choices"][0]["message"]["content"]
    prefix = on_retry.kept_prefix(text[: int(len(text) * cut)])
    body = on_retry.with_prefix({"model": "sim-echo", "messages": messages}, prefix)
    rest = model.chat_completion(body, created=0)
    assert on_retry.joined(rest, prefix)["choices"][0]["message"]["content"] == text
    shown = body["messages"] + [{"role": "user", "content": "again"}]
    again = model.chat_completion({"model": "sim-echo", "messages": shown}, created=0)
    assert again["choices"][0]["message"]["content"] == "echo: again"  # not a trailing one


def test_a_responses_prefix_is_a_trailing_assistant_input_item() -> None:
    as_text = on_retry.with_prefix({"model": "m", "input": "hi"}, "Hel")
    assert as_text["input"] == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Hel"},
    ]
    items = [{"type": "message", "role": "user", "content": "hi"}]
    assert on_retry.with_prefix({"input": items}, "Hel")["input"][-1] == {
        "role": "assistant",
        "content": "Hel",
    }


def test_a_response_gets_the_prefix_in_its_first_message_text() -> None:
    call = {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}
    text = {"type": "output_text", "text": "lo", "annotations": []}
    message = {"type": "message", "role": "assistant", "content": [text]}
    body = {"object": "response", "output": [call, message]}
    joined = on_retry.joined(body, "Hel")
    assert joined["output"][0] == call
    assert joined["output"][1]["content"] == [{**text, "text": "Hello"}]
    empty = {"object": "response", "output": [{**message, "content": []}]}
    (part,) = on_retry.joined(empty, "Hel")["output"][0]["content"]
    assert part["text"] == "Hel"


@given(
    cut_at=st.one_of(
        st.floats(allow_nan=True, allow_infinity=True),
        st.integers(),
        st.booleans(),
        st.text(max_size=3),
        st.none(),
    )
)
def test_sim_cut_at_is_a_fraction_strictly_inside_the_answer(cut_at: object) -> None:
    body = {"sim": {"cut_at": cut_at}}
    if isinstance(cut_at, int | float) and not isinstance(cut_at, bool) and 0 < cut_at < 1:
        assert sim.directives(body).cut_index(10) == int(10 * cut_at)
        return
    with pytest.raises(errors.InvalidRequest) as refused:
        sim.directives(body)
    assert refused.value.param == "body.sim.cut_at"


def test_the_simulator_refuses_an_anthropic_prefill_ending_in_whitespace() -> None:
    from jobgate.simulator import wire

    def body(prefill: str) -> dict[str, object]:
        turns = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": prefill}]
        return {"model": "claude-sim", "max_tokens": 8, "messages": turns}

    assert anthropic_requests.validate_messages(body("echo:")) is None
    problem = anthropic_requests.validate_messages(body("echo: "))
    assert problem is not None and "trailing whitespace" in problem
    assert wire.anthropic_message(body("echo:"))["content"][0]["text"] == " hi"
