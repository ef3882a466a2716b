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
from tests.domain.test_responses_domain import DONE, T0, make_job


@dataclasses.dataclass(frozen=True)
class Chunk:
    seq: int
    generation: int
    text: str


QUEUED = make_job(JobState.QUEUED)
RUNNING = make_job(JobState.RUNNING, started_at=T0)


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
    return make_job(JobState.SUCCEEDED, started_at=T0, completed_at=DONE, result=result)


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
    events = everything([(RUNNING, retried), (finished("echo: hello"), [])])
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
        JobState.FAILED, started_at=T0, completed_at=DONE,
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
