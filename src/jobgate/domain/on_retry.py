"""Continue on retry (`"on_retry": "continue"`): a retried streaming attempt sends the partial
answer its job already streamed as an assistant prefix, and its answer is that prefix plus the
provider's continuation.

The prefix is the latest attempt's text without its trailing whitespace (Anthropic refuses a
prefill that ends in whitespace, and a model continues a word boundary on its own). The
continuing attempt's output log starts with the prefix, so the latest generation of the log
is always the whole answer.
"""

from __future__ import annotations

from typing import Any

from jobgate import errors
from jobgate.domain import progress

JSONObject = dict[str, Any]

ON_RETRY = "on_retry"  # the submit option, kept in a job's stored body beside `stream`
CONTINUE = "continue"
RESTART = "restart"
CHOICES = (CONTINUE, RESTART)
# The endpoints whose bodies carry a trailing assistant message (or input item) as a prefix.
ENDPOINTS = frozenset({"/v1/chat/completions", "/v1/responses", "/v1/messages"})


def check_option(on_retry: str | None, *, stream: bool, endpoint: str) -> None:
    """Refuse `on_retry` (errors.InvalidRequest naming it) on a job it cannot apply to: only
    streaming jobs on a chat, Responses or Messages endpoint have partial output to go on
    from."""
    if on_retry is None:
        return
    if on_retry not in CHOICES:
        raise errors.InvalidRequest(
            f"on_retry must be one of {', '.join(CHOICES)}", param="on_retry"
        )
    if not stream:
        raise errors.InvalidRequest(
            "on_retry applies to streaming jobs only: set stream to true", param="on_retry"
        )
    if endpoint not in ENDPOINTS:
        raise errors.InvalidRequest(
            f"on_retry applies to {', '.join(sorted(ENDPOINTS))} jobs, not {endpoint!r}",
            param="on_retry",
        )


def wants_continue(request: object) -> bool:
    """Whether a stored job body asked to continue its retries."""
    return isinstance(request, dict) and request.get(ON_RETRY) == CONTINUE


def kept_prefix(partial: str) -> str:
    """What a continuing attempt keeps of the partial answer: all but trailing whitespace."""
    return partial.rstrip()


def with_prefix(body: JSONObject, prefix: str) -> JSONObject:
    """`body` (Chat Completions, Anthropic Messages or Responses) with `prefix` as a trailing
    assistant message, for the provider to continue."""
    if "messages" not in body and "input" in body:  # Responses: a string input is one turn
        given = body["input"]
        turns = list(given) if isinstance(given, list) else [{"role": "user", "content": given}]
        return {**body, "input": [*turns, {"role": "assistant", "content": prefix}]}
    messages = body.get("messages")
    messages = list(messages) if isinstance(messages, list) else []
    return {**body, "messages": [*messages, {"role": "assistant", "content": prefix}]}


def joined(body: JSONObject, prefix: str) -> JSONObject:
    """The continuation's answer `body` with `prefix` put back in front of its text: a Chat
    Completion's first choice, an Anthropic message's first text block, or a Response's first
    message's first output_text part (one made when the continuation has none)."""
    choices = body.get("choices")
    if isinstance(choices, list):
        return {**body, "choices": _joined_choices(choices, prefix)}
    content = body.get("content")
    if isinstance(content, list):
        return {**body, "content": _joined_blocks(content, prefix)}
    output = body.get("output")
    if isinstance(output, list):
        return {**body, "output": _joined_output(output, prefix)}
    return body


def _joined_choices(choices: list[Any], prefix: str) -> list[Any]:
    if not choices or not isinstance(choices[0], dict):
        return choices
    first = choices[0]
    message = first.get("message")
    message = message if isinstance(message, dict) else {}
    text = message.get("content")
    text = text if isinstance(text, str) else ""
    return [{**first, "message": {**message, "content": prefix + text}}, *choices[1:]]


def _joined_output(output: list[Any], prefix: str) -> list[Any]:
    """A Response's output with `prefix` in front of its first message's first text part."""
    for index, item in enumerate(output):
        if isinstance(item, dict) and item.get("type") == "message":
            parts = item.get("content")
            parts = parts if isinstance(parts, list) else []
            kept = [{**item, "content": _joined_parts(parts, prefix)}]
            return [*output[:index], *kept, *output[index + 1 :]]
    return output


def _joined_parts(parts: list[Any], prefix: str) -> list[Any]:
    for index, part in enumerate(parts):
        if isinstance(part, dict) and part.get("type") == "output_text":
            joined_part = {**part, "text": prefix + str(part.get("text") or "")}
            return [*parts[:index], joined_part, *parts[index + 1 :]]
    return [{"type": "output_text", "text": prefix, "annotations": []}, *parts]


def _joined_blocks(content: list[Any], prefix: str) -> list[Any]:
    for index, block in enumerate(content):
        if isinstance(block, dict) and block.get("type") == "text":
            joined_block = {**block, "text": prefix + str(block.get("text") or "")}
            return [*content[:index], joined_block, *content[index + 1 :]]
    return [{"type": "text", "text": prefix}, *content]


def cut_attempt_usage(input_tokens: int, prefix: str) -> tuple[int, int]:
    """(input, output) tokens billed for the cut attempt a continuation goes on from, which
    reported none (a stream's usage comes in its final event, which a cut stream never
    sends): it read the prompt the continuation read without the prefix (`input_tokens`, the
    continuation's, less the prefix's), and wrote the prefix. jobgate does not tokenize: the
    prefix counts its characters / 4, the estimate progress and rate limits use."""
    prefix_tokens = progress.streamed(len(prefix), None)[0]
    return max(input_tokens - prefix_tokens, 0), prefix_tokens
