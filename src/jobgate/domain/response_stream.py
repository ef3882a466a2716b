"""The `response.*` stream events of a /v1/responses job that streams its output live: the
events `response_events.stream_events` derives from the job, with the output text arriving as
`response.output_text.delta` events while the job runs, one per chunk of its output log.

`LiveResponseEvents` numbers the events as the job and its log grow. Fed the same job states
and chunks in order, any instance in any process yields the same `sequence_number`s, so a
client that resumes with `starting_after=N` elsewhere gets exactly the events it missed.

A new generation of the log (a reclaimed or retried attempt) never mixes into the text so far:
the message item of the previous attempt is closed `incomplete` and the new attempt's text
streams as a new output item (the next `output_index`). The final `response.completed` carries
the finished Response, whose `output` is the last attempt's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from jobgate.domain import response_events, responses
from jobgate.domain.job import Job

JSONObject = dict[str, Any]
_HEAD = 2  # response.created, response.queued


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
            events += response_events.stream_events(job)[:_HEAD]
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
                final = responses.render(job)
                events += self._close(
                    "completed" if final["status"] == "completed" else "incomplete"
                )
                events.append(_unnumbered(derived[-1]))
        numbered = [
            {**event, "sequence_number": self.next_seq + i} for i, event in enumerate(events)
        ]
        self.next_seq += len(events)
        return numbered

    def _at(self) -> JSONObject:
        return {"item_id": self._item_id, "output_index": self._output_index, "content_index": 0}

    def _open(self, job: Job, generation: int) -> list[JSONObject]:
        self._generation = generation
        self._output_index += 1
        self._item_id = f"msg_{job.id.removeprefix(responses.ID_PREFIX + '_')}_{generation}"
        self._text = []
        item = responses.message_item(self._item_id, [], status="in_progress")
        empty = {**responses.text_part(""), "logprobs": []}
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
        part = responses.text_part(text)
        item = responses.message_item(self._item_id, [part], status=status)
        return [
            {"type": "response.output_text.done", **self._at(), "text": text, "logprobs": []},
            {"type": "response.content_part.done", **self._at(), "part": part},
            {"type": "response.output_item.done", "output_index": self._output_index, "item": item},
        ]


def _unnumbered(event: JSONObject) -> JSONObject:
    return {key: value for key, value in event.items() if key != "sequence_number"}
