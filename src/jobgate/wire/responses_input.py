"""A Responses request's `input` (a string, or an array of input items) read into plain turns,
for the adapters that translate it into another wire format (Chat Completions, Messages).

Only what both targets can express is accepted; anything else is refused at submit time with
the `param` that names it, never dropped silently.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jobgate import errors

JSONObject = dict[str, Any]
ROLES = frozenset({"user", "assistant", "system", "developer"})


@dataclasses.dataclass(frozen=True, slots=True)
class Text:
    text: str


@dataclasses.dataclass(frozen=True, slots=True)
class Image:
    url: str  # an https URL or a data: URL
    detail: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class Message:
    role: str  # user | assistant | system (developer is read as system)
    parts: list[Text | Image]

    @property
    def text(self) -> str:
        return "".join(part.text for part in self.parts if isinstance(part, Text))


@dataclasses.dataclass(frozen=True, slots=True)
class ToolCall:
    call_id: str
    name: str
    arguments: str  # JSON text, as the model wrote it


@dataclasses.dataclass(frozen=True, slots=True)
class ToolOutput:
    call_id: str
    output: str


Turn = Message | ToolCall | ToolOutput


def unsupported(param: str, what: str, target: str) -> errors.InvalidRequest:
    return errors.InvalidRequest(
        f"{param}: {what} cannot be translated for a provider that speaks {target}",
        param=param,
        code="unsupported_parameter",
    )


def turns(body: JSONObject, *, target: str) -> list[Turn]:
    """The conversation of `body`: `instructions` first (as a system message), then `input`."""
    found: list[Turn] = []
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        found.append(Message("system", [Text(instructions)]))
    given = body.get("input")
    if isinstance(given, str):
        found.append(Message("user", [Text(given)]))
        return found
    if not isinstance(given, list):
        raise errors.InvalidRequest("input must be a string or an array of items", param="input")
    for index, item in enumerate(given):
        turn = _turn(item, f"input[{index}]", target)
        if turn is not None:
            found.append(turn)
    return found


def _turn(item: Any, where: str, target: str) -> Turn | None:
    if not isinstance(item, dict):
        raise errors.InvalidRequest(f"{where} must be an object", param=where)
    kind = item.get("type", "message")
    if kind == "message":
        role = item.get("role")
        if not isinstance(role, str) or role not in ROLES:
            raise errors.InvalidRequest(
                f"{where}.role must be one of user, assistant, system, developer",
                param=f"{where}.role",
            )
        role = "system" if role == "developer" else role
        return Message(role, _parts(item.get("content"), f"{where}.content", target))
    if kind == "function_call":
        call_id, name, arguments = (item.get(k) for k in ("call_id", "name", "arguments"))
        if not (isinstance(call_id, str) and isinstance(name, str) and isinstance(arguments, str)):
            raise errors.InvalidRequest(
                f"{where}: a function_call needs call_id, name and arguments (strings)",
                param=where,
            )
        return ToolCall(call_id, name, arguments)
    if kind == "function_call_output":
        call_id, output = item.get("call_id"), item.get("output")
        if isinstance(output, list):
            output = "".join(_part_text(part) for part in output)
        if not (isinstance(call_id, str) and isinstance(output, str)):
            raise errors.InvalidRequest(
                f"{where}: a function_call_output needs call_id and output (strings)",
                param=where,
            )
        return ToolOutput(call_id, output)
    if kind == "reasoning":
        return None  # the model's earlier reasoning: these targets take none back
    raise unsupported(f"{where}.type", f"input items of type {kind!r}", target)


def _part_text(part: Any) -> str:
    if isinstance(part, dict) and isinstance(part.get("text"), str):
        return str(part["text"])
    return ""


def _parts(content: Any, where: str, target: str) -> list[Text | Image]:
    if isinstance(content, str):
        return [Text(content)]
    if not isinstance(content, list):
        raise errors.InvalidRequest(f"{where} must be a string or an array", param=where)
    parts: list[Text | Image] = []
    for index, part in enumerate(content):
        at = f"{where}[{index}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text", "text") and isinstance(part.get("text"), str):
            parts.append(Text(part["text"]))
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            parts.append(Text(part["refusal"]))
        elif kind == "input_image":
            url = part.get("image_url")
            if not isinstance(url, str) or not url:
                raise unsupported(at, "images given by file_id", target)
            detail = part.get("detail")
            parts.append(Image(url, detail if isinstance(detail, str) else None))
        elif kind is None:
            raise errors.InvalidRequest(f"{at} must be an object with a type", param=at)
        else:
            raise unsupported(f"{at}.type", f"content of type {kind!r}", target)
    return parts


def function_tools(body: JSONObject, *, target: str) -> list[JSONObject]:
    """The request's tools, which must all be function tools here."""
    tools = body.get("tools") or []
    if not isinstance(tools, list):
        raise errors.InvalidRequest("tools must be an array", param="tools")
    for index, tool in enumerate(tools):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind != "function":
            raise unsupported(f"tools[{index}].type", f"tools of type {kind!r}", target)
    return tools


def refuse_unknown(body: JSONObject, known: frozenset[str], *, target: str) -> None:
    """Refuse members this translation does not carry over (they would change the answer)."""
    for key in sorted(body):
        if key not in known and body[key] is not None:
            raise unsupported(key, f"the {key!r} parameter", target)
