"""The live `response.*` events of a streaming /v1/responses job (domain.response_stream):
numbered alike however the job's states and its output log are read (so a resume in another
process continues exactly), a new attempt as a new output item, the non-streamed derivation
kept for jobs without a log, and every event valid under the `openai` SDK's types, strict."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import openai._models
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.responses import ResponseStreamEvent

from jobgate.domain import response_events
from jobgate.domain.response_stream import LiveResponseEvents
from jobgate.domain.states import JobState
from tests.domain.test_responses_domain import COMPLETED_RESULT, DONE, REQUEST, T0, make_job


@dataclasses.dataclass(frozen=True)
class Chunk:
    seq: int
    generation: int
    text: str


# A create with `stream: true` (the worker streams its output into the log).
STREAMED = {**REQUEST, "stream": True}
QUEUED = make_job(JobState.QUEUED, request=STREAMED)
RUNNING = make_job(JobState.RUNNING, started_at=T0, request=STREAMED)


def finished(text: str, status: str = "completed") -> Any:
    result = {
        "id": "resp_upstream",
        "object": "response",
        "status": status,
        "model": "sim-echo",
        "output": [
            {"id": "msg_up", "type": "message", "status": "completed", "role": "assistant",
             "content": [{"type": "output_text", "text": text, "annotations": []}]}
        ],
        "usage": {"input_tokens": 1, "output_tokens": 2, "total_tokens": 3},
    }  # fmt: skip
    return make_job(
        JobState.SUCCEEDED, started_at=T0, completed_at=DONE, result=result, request=STREAMED
    )


def strict(event: dict[str, Any]) -> None:
    openai._models.validate_type(type_=ResponseStreamEvent, value=event)  # type: ignore[arg-type]


def everything(reads: Sequence[tuple[Any, Sequence[Chunk]]]) -> list[dict[str, Any]]:
    live = LiveResponseEvents()
    return [event for job, chunks in reads for event in live.advance(job, chunks)]


CHUNKS = [Chunk(1, 1, "echo"), Chunk(2, 1, ": hel"), Chunk(3, 1, "lo")]


def test_a_streamed_response_in_order() -> None:
    events = everything(
        [(QUEUED, []), (RUNNING, CHUNKS[:2]), (finished("echo: hello"), CHUNKS[2:])]
    )
    assert [e["type"] for e in events] == [
        "response.created",
        "response.queued",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[8]["text"] == "echo: hello"
    final = events[-1]["response"]
    assert final["status"] == "completed"
    assert final["output"][0]["content"][0]["text"] == "echo: hello"
    for event in events:
        strict(event)


def test_a_new_attempt_is_a_new_output_item() -> None:
    retried = [Chunk(1, 1, "first "), Chunk(2, 2, "echo: "), Chunk(3, 2, "hello")]
    second_run = dataclasses.replace(finished("echo: hello"), run_count=2)
    events = everything([(dataclasses.replace(RUNNING, run_count=2), retried), (second_run, [])])
    done = [e for e in events if e["type"] == "response.output_item.done"]
    assert [(e["output_index"], e["item"]["status"]) for e in done] == [
        (0, "incomplete"),
        (1, "completed"),
    ]
    texts = [e["text"] for e in events if e["type"] == "response.output_text.done"]
    assert texts == ["first ", "echo: hello"]
    added = [e for e in events if e["type"] == "response.output_item.added"]
    assert [e["output_index"] for e in added] == [0, 1]
    assert added[0]["item"]["id"] != added[1]["item"]["id"]
    for event in events:
        strict(event)


def test_without_a_log_the_stored_answer_is_derived_as_before() -> None:
    job = finished("echo: hello")
    reads: Sequence[tuple[Any, Sequence[Chunk]]]
    for reads in ([(job, [])], [(QUEUED, []), (RUNNING, []), (job, [])]):
        assert everything(reads) == response_events.stream_events(job)
    cancelled = make_job(JobState.CANCELLED, completed_at=DONE)
    assert everything([(QUEUED, []), (cancelled, [])]) == response_events.stream_events(cancelled)


def test_a_failed_streamed_response_closes_its_item_incomplete() -> None:
    failed = make_job(
        JobState.FAILED, started_at=T0, completed_at=DONE, request=STREAMED,
        error={"code": "server_error", "message": "boom", "type": "provider_error"},
    )  # fmt: skip
    events = everything([(RUNNING, CHUNKS[:1]), (failed, [])])
    assert events[-1]["type"] == "response.failed"
    assert events[-2]["item"]["status"] == "incomplete"
    for event in events:
        strict(event)


@settings(max_examples=150, deadline=None)
@given(
    generations=st.lists(st.integers(1, 3), min_size=0, max_size=12).map(sorted),
    cuts=st.lists(st.integers(0, 12), max_size=6),
    polls_before_start=st.integers(0, 2),
)
def test_numbering_does_not_depend_on_how_the_log_is_read(
    generations: list[int], cuts: list[int], polls_before_start: int
) -> None:
    chunks = [Chunk(i + 1, g, f"t{i}") for i, g in enumerate(generations)]
    whole = everything([(RUNNING, chunks), (finished("x"), [])])
    reads: list[tuple[Any, list[Chunk]]] = [(QUEUED, [])] * polls_before_start
    start = 0
    for cut in sorted({min(c, len(chunks)) for c in cuts}):
        reads.append((RUNNING, chunks[start:cut]))
        start = cut
    reads.append((finished("x"), chunks[start:]))
    assert everything(reads) == whole
    # A client resuming after any event gets exactly the rest.
    for n in range(len(whole)):
        assert [e for e in everything(reads) if e["sequence_number"] > n] == whole[n + 1 :]


def _streamed(job: Any, **request: Any) -> Any:
    """`job` as a create with `stream: true` stores it (the worker streams its output)."""
    return dataclasses.replace(job, request={**STREAMED, **request})


def _items(events: list[dict[str, Any]], kind: str) -> list[tuple[int, str]]:
    return [(e["output_index"], e["item"]["id"]) for e in events if e["type"] == kind]


def test_text_then_a_tool_call_streams_every_item_as_the_response_holds_them() -> None:
    """Text, then a function call (and a reasoning item before the text, as reasoning models
    answer): each item streams added ... done, the call with its arguments events, under the
    id and output_index that `response.completed` carries."""
    done = _streamed(make_job(JobState.SUCCEEDED, started_at=T0, completed_at=DONE,
                              result=COMPLETED_RESULT))  # fmt: skip
    text = "echo: hello"
    chunks = [Chunk(1, 1, text[:4]), Chunk(2, 1, text[4:])]
    events = everything([(_streamed(RUNNING), chunks[:1]), (done, chunks[1:])])
    final = events[-1]["response"]
    assert events[-1]["type"] == "response.completed"
    held = [(index, item["id"]) for index, item in enumerate(final["output"])]
    assert _items(events, "response.output_item.added") == held
    assert _items(events, "response.output_item.done") == held
    kinds = [e["type"] for e in events]
    assert kinds.count("response.function_call_arguments.delta") == 1
    arguments = next(e for e in events if e["type"] == "response.function_call_arguments.done")
    call_index = [item["type"] for item in final["output"]].index("function_call")
    assert arguments["output_index"] == call_index
    assert arguments["item_id"] == final["output"][call_index]["id"]
    assert arguments["arguments"] == '{"q": 1}'
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    assert "".join(e["delta"] for e in deltas) == text
    assert {(e["output_index"], e["item_id"]) for e in deltas} == {held[0]}
    assert final["output"][0]["type"] == "message"  # the streamed text is the first item
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    for event in events:
        strict(event)


def test_the_streamed_message_id_is_the_final_one() -> None:
    """A translated provider names its message `msg_<suffix>`: the live item is announced
    under that id, and a native provider's own id is replaced by it, so both agree."""
    events = everything([(_streamed(RUNNING), CHUNKS), (_streamed(finished("echo: hello")), [])])
    [added] = _items(events, "response.output_item.added")
    assert added == (0, "msg_01abc")
    assert events[-1]["response"]["output"][0]["id"] == "msg_01abc"


def test_a_synchronous_stream_starts_in_progress_without_queued() -> None:
    """Without `background`, OpenAI's stream opens with `response.created` (status
    `in_progress`) and `response.in_progress`; `response.queued` is background mode's."""
    sync_queued = _streamed(QUEUED, background=False)
    events = everything([(sync_queued, []), (_streamed(RUNNING, background=False), CHUNKS)])
    assert [e["type"] for e in events[:3]] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
    ]
    assert events[0]["response"]["status"] == "in_progress"
    assert "response.queued" not in [e["type"] for e in events]
    derived = response_events.stream_events(dataclasses.replace(sync_queued, request={
        **REQUEST, "background": False}))  # fmt: skip
    assert [e["type"] for e in derived] == ["response.created", "response.in_progress"]
    background = everything([(_streamed(QUEUED), [])])
    assert [e["type"] for e in background] == ["response.created", "response.queued"]
