"""The simulator's streamed answers (`stream: true`): Chat Completions chunks, Responses events
and Anthropic Messages events, whose text arrives as `sim.chunks` deltas spread evenly over
`sim.latency_s` (one pause of `latency_s / chunks` before each delta). Every event has the
shape the official SDKs' stream types declare."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson

from jobgate.providers.streaming import output_text, split_evenly
from jobgate.simulator import wire
from jobgate.simulator.http11 import Stream
from jobgate.simulator.model import Directives

JSONObject = dict[str, Any]
SSE_HEADERS = {"content-type": "text/event-stream", "cache-control": "no-cache"}


def chat_stream(
    completion: JSONObject, body: JSONObject, plan: Directives, *, drop: bool
) -> Stream:
    """A `chat.completion` as `chat.completion.chunk` events, then `[DONE]`; the usage chunk
    (empty `choices`) only with `stream_options.include_usage`, as OpenAI does."""
    base = {
        "id": completion["id"],
        "object": "chat.completion.chunk",
        "created": completion["created"],
        "model": completion["model"],
        "system_fingerprint": completion.get("system_fingerprint"),
        "service_tier": completion.get("service_tier"),
    }

    def chunk(delta: JSONObject, finish_reason: str | None = None) -> JSONObject:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return {**base, "choices": [choice]}

    head = [chunk({"role": "assistant", "content": "", "refusal": None})]
    deltas = [
        chunk({"content": piece}) for piece in split_evenly(output_text(completion), plan.chunks)
    ]
    calls = completion["choices"][0]["message"].get("tool_calls") or []
    tail = [chunk({"tool_calls": part}) for index, call in enumerate(calls)
            for part in _tool_call_deltas(index, call)]  # fmt: skip
    tail.append(chunk({}, completion["choices"][0]["finish_reason"]))
    options = body.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage"):
        tail.append({**base, "choices": [], "usage": completion["usage"]})
    frames = [_data(event) for event in head] + [_data(event) for event in deltas]
    frames += [_data(event) for event in tail] + [b"data: [DONE]\n\n"]
    return _stream(frames, len(head), len(deltas), plan.latency_s, drop)


def _tool_call_deltas(index: int, call: JSONObject) -> list[list[JSONObject]]:
    """One tool call as OpenAI streams it: its id and name with empty arguments, then the
    arguments."""
    function = call["function"]
    opened = {"index": index, "id": call["id"], "type": "function",
              "function": {"name": function["name"], "arguments": ""}}  # fmt: skip
    return [[opened], [{"index": index, "function": {"arguments": function["arguments"]}}]]


def responses_stream(final: JSONObject, plan: Directives, *, drop: bool) -> Stream:
    """A finished `response` as Responses stream events, numbered by `sequence_number`."""
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
    return _stream(frames, len(head), len(deltas), plan.latency_s, drop)


def _function_call_events(index: int, item: JSONObject) -> list[JSONObject]:
    at = {"item_id": item["id"], "output_index": index}
    added = {**item, "status": "in_progress", "arguments": ""}
    return [
        {"type": "response.output_item.added", "output_index": index, "item": added},
        {"type": "response.function_call_arguments.delta", **at, "delta": item["arguments"]},
        {"type": "response.function_call_arguments.done", **at, "arguments": item["arguments"]},
        {"type": "response.output_item.done", "output_index": index, "item": item},
    ]


def messages_stream(message: JSONObject, plan: Directives, *, drop: bool) -> Stream:
    """An Anthropic `message` as Messages stream events."""
    events = wire.anthropic_stream_events(message, chunks=plan.chunks)
    texts = [
        i for i, event in enumerate(events) if event.get("delta", {}).get("type") == "text_delta"
    ]
    head, deltas = texts[0], len(texts)  # the text deltas are paced, not a tool's input
    frames = [_event(event["type"], event) for event in events]
    return _stream(frames, head, deltas, plan.latency_s, drop)


def _data(event: JSONObject) -> bytes:
    return b"data: " + orjson.dumps(event) + b"\n\n"


def _event(event_type: str, event: JSONObject) -> bytes:
    return f"event: {event_type}\ndata: ".encode() + orjson.dumps(event) + b"\n\n"


def _stream(frames: list[bytes], head: int, deltas: int, latency_s: float, drop: bool) -> Stream:
    return Stream(200, _paced(frames, head, deltas, latency_s, drop), dict(SSE_HEADERS))


async def _paced(
    frames: list[bytes], head: int, deltas: int, latency_s: float, drop: bool
) -> AsyncIterator[bytes]:
    """The frames, pausing `latency_s / deltas` before each of the delta frames
    `frames[head:head + deltas]`; with `drop`, the connection breaks halfway through."""
    pause_s = latency_s / deltas if deltas else 0.0
    if not deltas and latency_s:
        await asyncio.sleep(latency_s)
    for index, frame in enumerate(frames):
        if drop and index == len(frames) // 2:
            raise ConnectionAbortedError("simulated drop in the middle of a stream")
        if head <= index < head + deltas and pause_s:
            await asyncio.sleep(pause_s)
        yield frame
