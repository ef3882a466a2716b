"""The `response.*` stream events of a /v1/responses job that streams its output live: the
events `response_events.stream_events` derives from the job, with the output text arriving as
`response.output_text.delta` events while the job runs, one per chunk of its output log.

`LiveResponseEvents` numbers the events as the job and its log grow. Fed the same job states
and chunks in order, any instance in any process yields the same `sequence_number`s, so a
client that resumes with `starting_after=N` elsewhere gets exactly the events it missed.

The text streams as a message item announced before the provider has said what else it
answers, so the finished Response puts that message first under the same id
(`responses.as_streamed`); once the job has finished, the stream closes it with its final
content and then streams every other item (reasoning, function calls with their arguments
events) at the output_index `response.completed` gives it.

A new generation of the log (a reclaimed or retried attempt) never mixes into the text so far:
the message item of the previous attempt is closed `incomplete` and the new attempt's text
streams as a new output item (the next `output_index`). The final `response.completed` carries
the finished Response, whose `output` is the last attempt's: after such a retry the stream's
output_index of each item is the Response's plus the number of abandoned items before it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from jobgate.domain import response_events, responses
from jobgate.domain.job import Job
from jobgate.wire import responses_objects

JSONObject = dict[str, Any]


class Chunk(Protocol):
    @property
    def seq(self) -> int: ...
    @property
    def generation(self) -> int: ...
    @property
    def text(self) -> str: ...


class LiveResponseEvents:
    def __init__(self) -> None:
        self.next_seq = 0
        self._started = False
        self._finished = False
        self._generation: int | None = None
        self._output_index = -1
        self._item_id = ""
        self._text: list[str] = []

    @property
    def finished(self) -> bool:
        return self._finished

    def advance(self, job: Job, chunks: Sequence[Chunk]) -> list[JSONObject]:
        """The events that `job` (read before `chunks`) and the next `chunks` of its log add,
        numbered from where the last call stopped."""
        events: list[JSONObject] = []
        if self.next_seq == 0:
            events += response_events.head_events(job)
            # Without background mode the head already says in_progress.
            self._started = not response_events.background(job)
        if not self._started and (job.started_at is not None or chunks):
            self._started = True
            in_progress = responses.pending(job, "in_progress")
            events.append({"type": "response.in_progress", "response": in_progress})
        for chunk in chunks:
            if chunk.generation != self._generation:
                if self._generation is not None:
                    events += self._close("incomplete")
                events += self._open(job, chunk.generation)
            self._text.append(chunk.text)
            events.append(
                {
                    "type": "response.output_text.delta",
                    **self._at(),
                    "delta": chunk.text,
                    "logprobs": [],
                }
            )
        if job.terminal and not self._finished:
            self._finished = True
            derived = response_events.stream_events(job)
            if self._generation is None:
                # Nothing was streamed: the whole output as the job derives it.
                events += [_unnumbered(e) for e in derived[self.next_seq + len(events) :]]
            else:
                events += self._finish(responses.render(job))
                events.append(_unnumbered(derived[-1]))
        numbered = [
            {**event, "sequence_number": self.next_seq + i} for i, event in enumerate(events)
        ]
        self.next_seq += len(events)
        return numbered

    def _finish(self, final: JSONObject) -> list[JSONObject]:
        """Close the live item as the finished Response holds it (its first item, under the
        same id), then every other output item after it, whole."""
        output = final["output"] if final["status"] in responses.FINISHED else []
        first = output[0] if output else None
        if isinstance(first, dict) and first.get("id") == self._item_id:
            events = self._close_as(first)
            rest = output[1:]
        else:  # the text of an attempt whose answer is not the Response's (or it failed)
            events = self._close("incomplete")
            rest = output
        for offset, item in enumerate(rest, start=1):
            events += response_events.item_events(self._output_index + offset, item)
        return events

    def _close_as(self, item: JSONObject) -> list[JSONObject]:
        """The done events of the live item, with the content `item` finally holds: the
        streamed text part, then any further part (a refusal) whole."""
        parts = [part for part in item.get("content") or [] if isinstance(part, dict)]
        streamed = parts[0] if parts and parts[0].get("type") == "output_text" else None
        if streamed is None:
            streamed = responses_objects.text_part("".join(self._text))
        else:
            parts = parts[1:]
        text = streamed.get("text", "")
        events: list[JSONObject] = [
            {"type": "response.output_text.done", **self._at(), "text": text, "logprobs": []},
            {"type": "response.content_part.done", **self._at(), "part": streamed},
        ]
        where = {"item_id": self._item_id, "output_index": self._output_index}
        for content_index, part in enumerate(parts, start=1):
            events += response_events.part_events(where, content_index, part)
        events.append(
            {"type": "response.output_item.done", "output_index": self._output_index, "item": item}
        )
        return events

    def _at(self) -> JSONObject:
        return {"item_id": self._item_id, "output_index": self._output_index, "content_index": 0}

    def _open(self, job: Job, generation: int) -> list[JSONObject]:
        self._generation = generation
        self._output_index += 1
        self._item_id = responses.live_item_id(job.id, generation)
        self._text = []
        item = responses_objects.message_item(self._item_id, [], status="in_progress")
        empty = {**responses_objects.text_part(""), "logprobs": []}
        return [
            {
                "type": "response.output_item.added",
                "output_index": self._output_index,
                "item": item,
            },
            {"type": "response.content_part.added", **self._at(), "part": empty},
        ]

    def _close(self, status: str) -> list[JSONObject]:
        text = "".join(self._text)
        part = responses_objects.text_part(text)
        item = responses_objects.message_item(self._item_id, [part], status=status)
        return [
            {"type": "response.output_text.done", **self._at(), "text": text, "logprobs": []},
            {"type": "response.content_part.done", **self._at(), "part": part},
            {"type": "response.output_item.done", "output_index": self._output_index, "item": item},
        ]


def _unnumbered(event: JSONObject) -> JSONObject:
    return {key: value for key, value in event.items() if key != "sequence_number"}
