"""A Responses create request, checked beyond its JSON schema (the HTTP model checks types and
ranges), and split into what jobgate stores as the job's request and what only jobgate reads.

Every setting echoed back in the Response must already have OpenAI's shape here: a body the
official SDK rejects must never come out of a request we accepted.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from jobgate import errors
from jobgate.domain import continuation

JSONObject = dict[str, Any]
# Transport, not content: never stored (a stream is asked for per request).
TRANSPORT = frozenset({"stream", "stream_options"})
EXTENSIONS = frozenset({"webhook", "on_retry"})  # jobgate's own members of a create body
_FUNCTION_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_FORMATS = frozenset({"text", "json_object", "json_schema"})
_VERBOSITY = frozenset({"low", "medium", "high"})
_EFFORTS = frozenset({"none", "minimal", "low", "medium", "high", "xhigh", "max"})
_SUMMARIES = frozenset({"auto", "concise", "detailed"})
_CONTEXTS = frozenset({"auto", "current_turn", "all_turns"})
# reasoning.* members with a fixed set of values (`mode` is any string).
_REASONING_CHOICES = {
    "effort": _EFFORTS,
    "summary": _SUMMARIES,
    "generate_summary": _SUMMARIES,
    "context": _CONTEXTS,
}
# Built-in tools a native provider may run, and the members OpenAI requires of each (checked
# so that the Response echoing them always validates).
_BUILTIN_TOOLS: dict[str, tuple[tuple[str, type | tuple[type, ...]], ...]] = {
    "web_search": (),
    "web_search_2025_08_26": (),
    "web_search_preview": (),
    "web_search_preview_2025_03_11": (),
    "image_generation": (),
    "local_shell": (),
    "file_search": (("vector_store_ids", list),),
    "mcp": (("server_label", str),),
    "code_interpreter": (("container", (str, dict)),),
}
_HOSTED_CHOICES = frozenset({
    "file_search", "web_search_preview", "computer", "computer_use_preview", "computer_use",
    "web_search_preview_2025_03_11", "image_generation", "code_interpreter",
})  # fmt: skip


@dataclasses.dataclass(frozen=True, slots=True)
class CreateRequest:
    body: JSONObject  # the stored Responses request (with `background`, without transport)
    background: bool
    stream: bool
    metadata: JSONObject
    webhook: JSONObject | None
    on_retry: str | None = None  # "continue" | "restart": a streamed create's retries


def parse_create(payload: JSONObject) -> CreateRequest:
    """Check a create body whose member types the schema already checked; raise
    errors.InvalidRequest naming the parameter."""
    continuation.check(payload)
    if not payload.get("input"):
        raise errors.InvalidRequest(
            "input must be a non-empty string or array of input items", param="input"
        )
    background = payload.get("background") is True
    if background and payload.get("store") is False:
        raise errors.InvalidRequest(
            "background mode requires store=true", param="store", code="invalid_value"
        )
    _check_tools(payload.get("tools"))
    _check_tool_choice(payload.get("tool_choice"))
    _check_text(payload.get("text"))
    _check_reasoning(payload.get("reasoning"))
    stored = {
        key: value
        for key, value in payload.items()
        if key not in TRANSPORT and key not in EXTENSIONS
    }
    stored["background"] = background
    metadata = payload.get("metadata")
    return CreateRequest(
        body=stored,
        background=background,
        stream=payload.get("stream") is True,
        metadata=dict(metadata) if isinstance(metadata, dict) else {},
        webhook=payload.get("webhook"),
        on_retry=payload.get("on_retry"),
    )


def _check_tools(tools: Any) -> None:
    for index, tool in enumerate(tools or []):
        where = f"tools[{index}]"
        kind = tool.get("type")
        if not isinstance(kind, str) or not kind:
            raise errors.InvalidRequest(f"{where}.type is required", param=f"{where}.type")
        if kind != "function":
            _check_builtin(tool, kind, where)
            continue
        name = tool.get("name")
        if not isinstance(name, str) or not _FUNCTION_NAME.match(name):
            raise errors.InvalidRequest(
                f"{where}.name must be 1-64 letters, digits, _ or -", param=f"{where}.name"
            )
        for key, kinds in (("parameters", dict), ("strict", bool), ("description", str)):
            if tool.get(key) is not None and not isinstance(tool[key], kinds):
                raise errors.InvalidRequest(
                    f"{where}.{key} must be a {kinds.__name__}", param=f"{where}.{key}"
                )


def _check_builtin(tool: JSONObject, kind: str, where: str) -> None:
    """A built-in tool: only a native provider can run it (and checks the rest)."""
    required = _BUILTIN_TOOLS.get(kind)
    if required is None:
        raise errors.InvalidRequest(
            f"{where}.type {kind!r} is not supported by jobgate",
            param=f"{where}.type",
            code="unsupported_parameter",
        )
    for key, kinds in required:
        if not isinstance(tool.get(key), kinds):
            raise errors.InvalidRequest(
                f"{where}.{key} is required for a {kind} tool", param=f"{where}.{key}"
            )


def _check_tool_choice(choice: Any) -> None:
    if not isinstance(choice, dict):
        return  # absent, or one of the strings the schema allows
    kind = choice.get("type")
    needs = {"function": "name", "custom": "name", "mcp": "server_label"}
    if not isinstance(kind, str):
        kind = None  # refused below, never looked up (an object or list is unhashable)
    if kind in needs:
        if not isinstance(choice.get(needs[kind]), str):
            raise errors.InvalidRequest(
                f"tool_choice.{needs[kind]} is required for {kind}",
                param=f"tool_choice.{needs[kind]}",
            )
    elif kind == "allowed_tools":
        if choice.get("mode") not in ("auto", "required") or not isinstance(
            choice.get("tools"), list
        ):
            raise errors.InvalidRequest(
                "tool_choice: allowed_tools needs mode (auto or required) and tools",
                param="tool_choice",
            )
    elif kind not in _HOSTED_CHOICES:
        raise errors.InvalidRequest(
            "tool_choice.type must be function, custom, mcp, allowed_tools or a hosted tool",
            param="tool_choice.type",
        )


def _check_text(text: Any) -> None:
    if text is None:
        return
    fmt = text.get("format")
    if fmt is not None:
        kind = fmt.get("type") if isinstance(fmt, dict) else None
        if not _one_of(kind, _FORMATS):
            raise errors.InvalidRequest(
                "text.format.type must be text, json_object or json_schema",
                param="text.format.type",
            )
        if kind == "json_schema" and not (
            isinstance(fmt.get("name"), str) and isinstance(fmt.get("schema"), dict)
        ):
            raise errors.InvalidRequest(
                "text.format needs a name and a schema object for json_schema",
                param="text.format",
            )
    verbosity = text.get("verbosity")
    if verbosity is not None and not _one_of(verbosity, _VERBOSITY):
        raise errors.InvalidRequest(
            "text.verbosity must be low, medium or high", param="text.verbosity"
        )


def _check_reasoning(reasoning: Any) -> None:
    if reasoning is None:
        return
    for key, allowed in _REASONING_CHOICES.items():
        value = reasoning.get(key)
        if value is not None and not _one_of(value, allowed):
            raise errors.InvalidRequest(
                f"reasoning.{key} must be one of {', '.join(sorted(allowed))}",
                param=f"reasoning.{key}",
            )
    mode = reasoning.get("mode")
    if mode is not None and not isinstance(mode, str):
        raise errors.InvalidRequest("reasoning.mode must be a string", param="reasoning.mode")


def _one_of(value: Any, allowed: frozenset[str]) -> bool:
    """Whether `value` is one of the strings `allowed` (any other JSON value is not, objects
    and lists included: they cannot even be looked up)."""
    return isinstance(value, str) and value in allowed
