"""The `response.*` stream events of a /v1/responses job, numbered by `sequence_number`.

jobgate stores whole answers, so the events are derived from the job as it stands: created and
queued, in_progress once a worker has started it, then (when it has finished) each output item
as added / delta / done events and the terminal event. A response without `background` opens
as OpenAI's do: created already `in_progress`, then in_progress (`queued` is background
mode's). The derivation is deterministic and only ever appends, so a client that resumes with
`starting_after=N` sees exactly the events it missed.
"""

from __future__ import annotations

from typing import Any

from jobgate.domain import responses
from jobgate.domain.job import Job
from jobgate.domain.states import JobState

JSONObject = dict[str, Any]
_TERMINAL_EVENT = {
    "completed": "response.completed",
    "incomplete": "response.incomplete",
    "failed": "response.failed",
}


def background(job: Job) -> bool:
    return isinstance(job.request, dict) and job.request.get("background") is True


def head_events(job: Job) -> list[JSONObject]:
    """The two events every stream opens with: created and queued in background mode, else
    created (already in progress) and in_progress."""
    if background(job):
        queued = responses.pending(job, "queued")
        return [
            {"type": "response.created", "response": queued},
            {"type": "response.queued", "response": queued},
        ]
    in_progress = responses.pending(job, "in_progress")
    return [
        {"type": "response.created", "response": in_progress},
        {"type": "response.in_progress", "response": in_progress},
    ]


def stream_events(job: Job) -> list[JSONObject]:
    """Every event of the job so far, each with its `sequence_number` (from 0)."""
    final = responses.render(job)
    events = head_events(job)
    if job.started_at is not None and background(job):  # a worker claimed it at least once
        in_progress = responses.pending(job, "in_progress")
        events.append({"type": "response.in_progress", "response": in_progress})
    if job.terminal:
        status = final["status"]
        if status in responses.FINISHED:
            for index, item in enumerate(final["output"]):
                events += item_events(index, item)
        terminal = _TERMINAL_EVENT.get(status)
        if terminal is not None:
            events.append({"type": terminal, "response": final})
        else:
            # Streams have no `response.cancelled` event: the stream ends with an error event
            # naming why (the Response itself says `cancelled`).
            expired = job.state is JobState.EXPIRED
            events.append(
                {
                    "type": "error",
                    "code": "response_expired" if expired else "response_cancelled",
                    "message": "the response expired before it started"
                    if expired
                    else "the response was cancelled",
                    "param": None,
                }
            )
    return [{**event, "sequence_number": seq} for seq, event in enumerate(events)]


def item_events(index: int, item: Any) -> list[JSONObject]:
    """One output item, whole, as added / delta / done events at `output_index` `index`."""
    if not isinstance(item, dict):
        return []
    kind = item.get("type")
    item_id = item.get("id", "")
    where = {"item_id": item_id, "output_index": index}
    if kind == "message":
        added = {**item, "status": "in_progress", "content": []}
        events: list[JSONObject] = [
            {"type": "response.output_item.added", "output_index": index, "item": added}
        ]
        for content_index, part in enumerate(item.get("content") or []):
            events += part_events(where, content_index, part)
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
        return events
    if kind == "function_call":
        arguments = item.get("arguments", "")
        added = {**item, "status": "in_progress", "arguments": ""}
        return [
            {"type": "response.output_item.added", "output_index": index, "item": added},
            {"type": "response.function_call_arguments.delta", **where, "delta": arguments},
            {"type": "response.function_call_arguments.done", **where, "arguments": arguments},
            {"type": "response.output_item.done", "output_index": index, "item": item},
        ]
    return [
        {"type": "response.output_item.added", "output_index": index, "item": item},
        {"type": "response.output_item.done", "output_index": index, "item": item},
    ]


def part_events(where: JSONObject, content_index: int, part: Any) -> list[JSONObject]:
    """One content part of a message (`where`: its item_id and output_index), whole."""
    if not isinstance(part, dict):
        return []
    at = {**where, "content_index": content_index}
    if part.get("type") == "output_text":
        text = part.get("text", "")
        empty = {**part, "text": "", "annotations": []}
        return [
            {"type": "response.content_part.added", **at, "part": empty},
            {"type": "response.output_text.delta", **at, "delta": text, "logprobs": []},
            {"type": "response.output_text.done", **at, "text": text, "logprobs": []},
            {"type": "response.content_part.done", **at, "part": part},
        ]
    if part.get("type") == "refusal":
        refusal = part.get("refusal", "")
        return [
            {"type": "response.content_part.added", **at, "part": {**part, "refusal": ""}},
            {"type": "response.refusal.delta", **at, "delta": refusal},
            {"type": "response.refusal.done", **at, "refusal": refusal},
            {"type": "response.content_part.done", **at, "part": part},
        ]
    return [
        {"type": "response.content_part.added", **at, "part": part},
        {"type": "response.content_part.done", **at, "part": part},
    ]
