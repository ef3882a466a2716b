"""Reading the text and the tools of a request or an answer in any of the three wires (Chat
Completions, Responses, Anthropic Messages), and cutting a text into stream deltas."""

from __future__ import annotations

from typing import Any

JSONObject = dict[str, Any]


def content_text(content: Any) -> str:
    """The text of a message's content: a string, or the `text` of each part of a list of
    content parts (`text`, `input_text`, `output_text`); anything else has none."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part["text"]
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def tool_names(body: JSONObject) -> list[str]:
    """The names of the function tools a request declares, in any of the three wires: Chat
    Completions `{"type": "function", "function": {"name"}}`, Responses `{"type":
    "function", "name"}`, Anthropic `{"name", "input_schema"}` (type absent or `custom`; its
    server tools have other types)."""
    tools = body.get("tools")
    names: list[str] = []
    for tool in tools if isinstance(tools, list) else []:
        if not isinstance(tool, dict):
            continue
        function = tool.get("function")
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            names.append(function["name"])
        elif tool.get("type") in ("function", "custom", None) and isinstance(tool.get("name"), str):
            names.append(tool["name"])
    return names


def output_text(body: Any) -> str:
    """The assistant text of a finished answer, whatever its wire: a Chat Completion
    (`choices[0].message.content`), a Response (`output[].content[]` output_text parts) or an
    Anthropic message (`content[]` text blocks). Empty when there is none."""
    if not isinstance(body, dict):
        return ""
    choices = body.get("choices")
    if isinstance(choices, list):
        first = choices[0] if choices else None
        message = first.get("message") if isinstance(first, dict) else None
        content = message.get("content") if isinstance(message, dict) else None
        return content if isinstance(content, str) else ""
    if body.get("object") == "response" or isinstance(body.get("output"), list):
        return "".join(
            part.get("text", "")
            for item in body.get("output") or []
            if isinstance(item, dict) and item.get("type") == "message"
            for part in item.get("content") or []
            if isinstance(part, dict) and part.get("type") == "output_text"
        )
    content = body.get("content")
    if isinstance(content, list):
        return "".join(
            block.get("text", "")
            for block in content
            if isinstance(block, dict) and block.get("type") == "text"
        )
    return ""


def split_evenly(text: str, pieces: int) -> list[str]:
    """`text` cut into `pieces` parts of near-equal length (some empty when the text is
    shorter than that); their concatenation is `text`."""
    pieces = max(1, pieces)
    size, extra = divmod(len(text), pieces)
    parts = []
    start = 0
    for index in range(pieces):
        end = start + size + (1 if index < extra else 0)
        parts.append(text[start:end])
        start = end
    return parts
