"""The simulator's streamed answers (`stream: true`): Chat Completions chunks, Responses events
and Anthropic Messages events, whose text arrives as `sim.chunks` deltas spread evenly over
`sim.latency_s` (one pause of `latency_s / chunks` before each delta). Every event has the
shape the official SDKs' stream types declare."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson

from jobgate.simulator import choices, stream_faults, wire
from jobgate.simulator.http11 import STALL, Stream
from jobgate.wire.content import split_evenly
from jobgate.wire.sim import Directives

JSONObject = dict[str, Any]
SSE_HEADERS = {"content-type": "text/event-stream", "cache-control": "no-cache"}


def chat_stream(
    completion: JSONObject,
    body: JSONObject,
    plan: Directives,
    *,
    drop: bool,
    fault: str | None = None,
) -> Stream:
    """A `chat.completion` as `chat.completion.chunk` events, then `[DONE]`: every choice's
    deltas by its `index` (with their tokens' logprobs when asked), the usage chunk (empty
    `choices`) only with `stream_options.include_usage`, as OpenAI does. A `fault` is reported
    `sim.cut_at` through the text (simulator.stream_faults)."""
    base = {
        "id": completion["id"],
        "object": "chat.completion.chunk",
        "created": completion["created"],
        "model": completion["model"],
        "system_fingerprint": completion.get("system_fingerprint"),
        "service_tier": completion.get("service_tier"),
    }

    def chunk(
        index: int,
        delta: JSONObject,
        finish_reason: str | None = None,
        logprobs: JSONObject | None = None,
    ) -> JSONObject:
        choice = {"index": index, "delta": delta, "logprobs": logprobs,
                  "finish_reason": finish_reason}  # fmt: skip
        return {**base, "choices": [choice]}

    every = completion["choices"]
    head = [chunk(c["index"], {"role": "assistant", "content": "", "refusal": None}) for c in every]
    pieces = [choices.stream_pieces(c, plan.chunks) for c in every]
    deltas = [
        chunk(c["index"], {"content": part[step][0]}, logprobs=part[step][1])
        for step in range(max(len(part) for part in pieces))
        for c, part in zip(every, pieces, strict=True)
        if step < len(part)
    ]
    tail: list[JSONObject] = []
    for c in every:
        calls = c["message"].get("tool_calls") or []
        tail += [chunk(c["index"], {"tool_calls": part}) for index, call in enumerate(calls)
                 for part in _tool_call_deltas(index, call)]  # fmt: skip
        tail.append(chunk(c["index"], {}, c["finish_reason"]))
    options = body.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage"):
        tail.append({**base, "choices": [], "usage": completion["usage"]})
    frames = [_data(event) for event in head] + [_data(event) for event in deltas]
    frames += [_data(event) for event in tail] + [b"data: [DONE]\n\n"]
    failure = None
    if fault is not None and fault != stream_faults.STALL:
        failure = _data(stream_faults.chat_error(fault, completion["model"], plan.retry_after_s))
    return _stream(frames, len(head), len(deltas), plan, drop, fault, failure)


def _tool_call_deltas(index: int, call: JSONObject) -> list[list[JSONObject]]:
    """One tool call as OpenAI streams it: its id and name with empty arguments, then the
    arguments."""
    function = call["function"]
    opened = {"index": index, "id": call["id"], "type": "function",
              "function": {"name": function["name"], "arguments": ""}}  # fmt: skip
    return [[opened], [{"index": index, "function": {"arguments": function["arguments"]}}]]


def responses_stream(
    final: JSONObject, plan: Directives, *, drop: bool, fault: str | None = None
) -> Stream:
    """A finished `response` as Responses stream events, numbered by `sequence_number`; a
    `fault` is reported `sim.cut_at` through the text (simulator.stream_faults)."""
    in_progress = {**final, "status": "in_progress", "output": [], "usage": None,
                   "completed_at": None, "incomplete_details": None, "error": None}  # fmt: skip
    head: list[JSONObject] = [
        {"type": "response.created", "response": in_progress},
        {"type": "response.in_progress", "response": in_progress},
    ]
    deltas: list[JSONObject] = []
    tail: list[JSONObject] = []
    for index, item in enumerate(final["output"]):
        at = {"item_id": item["id"], "output_index": index}
        if item["type"] == "function_call":
            tail += _function_call_events(index, item)
            continue
        head.append(
            {
                "type": "response.output_item.added",
                "output_index": index,
                "item": {**item, "status": "in_progress", "content": []},
            }
        )
        for content_index, part in enumerate(item["content"]):
            where = {**at, "content_index": content_index}
            head.append(
                {
                    "type": "response.content_part.added",
                    **where,
                    "part": {**part, "text": ""},
                }
            )
            deltas += [
                {"type": "response.output_text.delta", **where, "delta": piece, "logprobs": []}
                for piece in split_evenly(part["text"], plan.chunks)
            ]
            tail += [
                {
                    "type": "response.output_text.done",
                    **where,
                    "text": part["text"],
                    "logprobs": [],
                },
                {"type": "response.content_part.done", **where, "part": part},
            ]
        tail.append({"type": "response.output_item.done", "output_index": index, "item": item})
    terminal = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
    if final["status"] == "failed":
        terminal = "response.failed"
    tail.append({"type": terminal, "response": final})
    events = head + deltas + tail
    frames = [
        _event(event["type"], {**event, "sequence_number": seq}) for seq, event in enumerate(events)
    ]
    failure = None
    if fault is not None and fault != stream_faults.STALL:
        reported = stream_faults.responses_error(fault, final["model"], plan.retry_after_s)
        number = len(head) + len(deltas) // 2  # numbered where it stands in the stream
        failure = _event("error", {**reported, "sequence_number": number})
    return _stream(frames, len(head), len(deltas), plan, drop, fault, failure)


def _function_call_events(index: int, item: JSONObject) -> list[JSONObject]:
    at = {"item_id": item["id"], "output_index": index}
    added = {**item, "status": "in_progress", "arguments": ""}
    return [
        {"type": "response.output_item.added", "output_index": index, "item": added},
        {"type": "response.function_call_arguments.delta", **at, "delta": item["arguments"]},
        {"type": "response.function_call_arguments.done", **at, "arguments": item["arguments"]},
        {"type": "response.output_item.done", "output_index": index, "item": item},
    ]


def messages_stream(
    message: JSONObject,
    plan: Directives,
    *,
    drop: bool,
    fault: str | None = None,
    now_s: float = 0.0,
) -> Stream:
    """An Anthropic `message` as Messages stream events; a `fault` is reported
    `sim.cut_at` through the text (simulator.stream_faults)."""
    events = wire.anthropic_stream_events(message, chunks=plan.chunks)
    texts = [
        i for i, event in enumerate(events) if event.get("delta", {}).get("type") == "text_delta"
    ]
    head, deltas = texts[0], len(texts)  # the text deltas are paced, not a tool's input
    frames = [_event(event["type"], event) for event in events]
    failure = headers = None
    if fault is not None:
        headers = stream_faults.messages_headers(fault, plan.retry_after_s, now_s)
        if fault != stream_faults.STALL:
            failure = _event("error", stream_faults.messages_error(fault))
    return _stream(frames, head, deltas, plan, drop, fault, failure, headers)


def _data(event: JSONObject) -> bytes:
    return b"data: " + orjson.dumps(event) + b"\n\n"


def _event(event_type: str, event: JSONObject) -> bytes:
    return f"event: {event_type}\ndata: ".encode() + orjson.dumps(event) + b"\n\n"


def _stream(
    frames: list[bytes],
    head: int,
    deltas: int,
    plan: Directives,
    drop: bool,
    fault: str | None = None,
    failure: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> Stream:
    cut = head + plan.cut_index(deltas)
    paced = _paced(frames, head, deltas, plan.latency_s, drop, fault, failure, cut)
    return Stream(200, paced, {**SSE_HEADERS, **(headers or {})})


async def _paced(
    frames: list[bytes],
    head: int,
    deltas: int,
    latency_s: float,
    drop: bool,
    fault: str | None,
    failure: bytes | None,
    cut: int,
) -> AsyncIterator[bytes]:
    """The frames, pausing `latency_s / deltas` before each of the delta frames
    `frames[head:head + deltas]`; with `drop`, the connection breaks halfway through; with a
    `fault`, at frame `cut` (`sim.cut_at` of the deltas, default half) comes its `failure`
    frame and the end of the answer,
    or (a stall) nothing more."""
    pause_s = latency_s / deltas if deltas else 0.0
    if not deltas and latency_s:
        await asyncio.sleep(latency_s)
    for index, frame in enumerate(frames):
        if drop and index == len(frames) // 2:
            raise ConnectionAbortedError("simulated drop in the middle of a stream")
        if fault is not None and index == cut:
            yield STALL if failure is None else failure
            return
        if head <= index < head + deltas and pause_s:
            await asyncio.sleep(pause_s)
        yield frame
