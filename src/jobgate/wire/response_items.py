"""Responses items as jobgate keeps them for multi-turn context: a create's `input` (a string or
an array of input items) and a Response's output read as items of OpenAI's conversation item
shape (`id`, `type`, `status`, typed content parts), and a stored request's context joined to
its own input, which is what every provider receives.

A stored /v1/responses request that continues earlier turns carries them under `CONTEXT`:
`{"items": [...], "responses": [ids]}` (the items that came before its own `input`, and the
ids of the earlier responses they came from). Only jobgate reads that member; it never reaches
a provider and a client may not send it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

JSONObject = dict[str, Any]
NewId = Callable[[str], str]  # an id with this prefix (`msg` → `msg_…`)

CONTEXT = "jobgate_context"
# Members of a stored create that only jobgate reads (the context replaces them upstream).
CONTINUATION = frozenset({"previous_response_id", "conversation", CONTEXT})
ID_PREFIXES = {
    "message": "msg",
    "function_call": "fc",
    "function_call_output": "fco",
    "reasoning": "rs",
}
_WITH_STATUS = frozenset({"message", "function_call", "function_call_output"})
_INPUT_ROLES = frozenset({"user", "system", "developer"})


def as_items(given: Any, new_id: NewId) -> list[JSONObject]:
    """A create's `input` as items: a string is one user message; each item gets an `id` and
    a `status` where its type has them, and a message's string content becomes one text part
    (`input_text`, or `output_text` for the assistant). Items that are not objects are left
    out (the create's checks refuse them before this is reached)."""
    if isinstance(given, str):
        given = [{"type": "message", "role": "user", "content": given}]
    if not isinstance(given, list):
        return []
    return [item_of(item, new_id) for item in given if isinstance(item, dict)]


def item_of(item: JSONObject, new_id: NewId) -> JSONObject:
    """One input or output item in the conversation item shape (a copy; `item` is left as it
    was)."""
    kind = item.get("type", "message")
    kind = kind if isinstance(kind, str) else "message"
    shaped: JSONObject = {**item, "type": kind}
    if not isinstance(item.get("id"), str) or not item["id"]:
        shaped["id"] = new_id(ID_PREFIXES.get(kind, "item"))
    if kind in _WITH_STATUS and item.get("status") not in (
        "in_progress",
        "completed",
        "incomplete",
    ):
        shaped["status"] = "completed"
    if kind == "message":
        shaped["content"] = _content(item.get("role"), item.get("content"))
    return shaped


def _content(role: Any, content: Any) -> Any:
    if not isinstance(content, str):
        return content
    if role in _INPUT_ROLES:
        return [{"type": "input_text", "text": content}]
    return [{"type": "output_text", "text": content, "annotations": []}]


def context_of(request: JSONObject) -> tuple[list[JSONObject], list[str]]:
    """The context a stored request carries: its earlier items and the responses they came
    from (none for a request that continues nothing)."""
    context = request.get(CONTEXT)
    if not isinstance(context, dict):
        return [], []
    items = context.get("items")
    chain = context.get("responses")
    return (
        [item for item in items if isinstance(item, dict)] if isinstance(items, list) else [],
        [rid for rid in chain if isinstance(rid, str)] if isinstance(chain, list) else [],
    )


def with_context(request: JSONObject, items: list[JSONObject], responses: list[str]) -> JSONObject:
    """`request` carrying `items` before its own input (and the ids of `responses`)."""
    return {**request, CONTEXT: {"items": items, "responses": responses}}


def upstream(request: JSONObject) -> JSONObject:
    """What a provider receives for a stored request: its context joined to its own `input`
    (a string input becomes a user message item), without the members only jobgate reads.
    Reasoning items of the context go only with their `encrypted_content`: without it, a
    provider can only look them up by id in its own store, which jobgate does not use."""
    sent = {key: value for key, value in request.items() if key not in CONTINUATION}
    items, _ = context_of(request)
    items = [item for item in items if item.get("type") != "reasoning" or _sealed(item)]
    if not items:
        return sent
    own = request.get("input")
    if isinstance(own, str):
        own = [{"type": "message", "role": "user", "content": own}]
    sent["input"] = [*items, *(own if isinstance(own, list) else [])]
    return sent


def _sealed(item: JSONObject) -> bool:
    return isinstance(item.get("encrypted_content"), str)
