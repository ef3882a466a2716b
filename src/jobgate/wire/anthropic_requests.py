"""Anthropic request bodies checked at submit, before anything is sent: a Messages create (alone,
or as one request of a Message Batch)."""

from __future__ import annotations

from typing import Any

from jobgate.wire import content

JSONObject = dict[str, Any]


def validate_messages(body: JSONObject) -> str | None:
    """The problem with a Messages create body, or None (Anthropic requires these three)."""
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "model: Field required"
    max_tokens = body.get("max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        return "max_tokens: Field required"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: Field required"
    if any(not isinstance(m, dict) or m.get("role") not in ("user", "assistant") for m in messages):
        return "messages: each message needs a role of user or assistant"
    prefill = content.content_text(messages[-1].get("content"))
    if messages[-1]["role"] == "assistant" and prefill != prefill.rstrip():
        # A trailing assistant turn is a prefill to continue: Anthropic refuses trailing space.
        return "messages: final assistant content cannot end with trailing whitespace"
    return None
