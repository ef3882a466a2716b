"""OpenAI request bodies checked at submit, before anything is sent: a Chat Completions create and
a Responses create. Only what the API itself refuses; the HTTP models check types and ranges."""

from __future__ import annotations

from typing import Any

from jobgate import errors

JSONObject = dict[str, Any]


def validate_chat(body: JSONObject) -> None:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise errors.InvalidRequest(
            "body.messages must be a non-empty array of messages", param="body.messages"
        )
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise errors.InvalidRequest(
                f"body.messages[{index}] must be an object with a role",
                param=f"body.messages[{index}]",
            )
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise errors.InvalidRequest("body.model is required", param="body.model")


def validate_responses(body: JSONObject) -> str | None:
    """The problem with a Responses create body, or None."""
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "model is required"
    given = body.get("input")
    if not isinstance(given, str | list) or not given:
        return "input must be a non-empty string or array of input items"
    return None
