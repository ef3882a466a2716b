"""Items a client adds to a conversation (POST /v1/conversations, its `/items`), checked and
rebuilt from the members OpenAI defines, so that every item listed later validates as the
official SDK's `ConversationItem`: messages (text, refusal and image parts), function calls
and their outputs. Anything else is refused with the `param` that names it.
"""

from __future__ import annotations

from typing import Any

from jobgate import errors

JSONObject = dict[str, Any]
MAX_ITEMS = 20  # per request, as OpenAI allows
ROLES = frozenset({"user", "assistant", "system", "developer"})
DETAILS = frozenset({"low", "high", "auto", "original"})
_TEXT_PARTS = frozenset({"input_text", "output_text"})


def check(items: Any, *, param: str = "items") -> list[JSONObject]:
    """`items` rebuilt as conversation items without ids (the caller gives them theirs);
    raise errors.InvalidRequest naming the first item that is not one."""
    if not isinstance(items, list):
        raise errors.InvalidRequest(f"{param} must be an array of items", param=param)
    if len(items) > MAX_ITEMS:
        raise errors.InvalidRequest(
            f"{param}: at most {MAX_ITEMS} items may be added at a time", param=param
        )
    return [_item(item, f"{param}[{index}]") for index, item in enumerate(items)]


def _item(item: Any, where: str) -> JSONObject:
    if not isinstance(item, dict):
        raise errors.InvalidRequest(f"{where} must be an object", param=where)
    kind = item.get("type", "message")
    if kind == "message":
        return _message(item, where)
    if kind == "function_call":
        call_id, name, arguments = (
            _text(item, key, where) for key in ("call_id", "name", "arguments")
        )
        return {"type": kind, "call_id": call_id, "name": name, "arguments": arguments}
    if kind == "function_call_output":
        call_id, output = (_text(item, key, where) for key in ("call_id", "output"))
        return {"type": kind, "call_id": call_id, "output": output}
    raise errors.InvalidRequest(
        f"{where}.type must be message, function_call or function_call_output",
        param=f"{where}.type",
        code="unsupported_parameter",
    )


def _message(item: JSONObject, where: str) -> JSONObject:
    role = item.get("role")
    if not isinstance(role, str) or role not in ROLES:
        raise errors.InvalidRequest(
            f"{where}.role must be one of user, assistant, system, developer",
            param=f"{where}.role",
        )
    content = item.get("content")
    if isinstance(content, str):
        return {"type": "message", "role": role, "content": content}
    if not isinstance(content, list) or not content:
        raise errors.InvalidRequest(
            f"{where}.content must be a string or a non-empty array of parts",
            param=f"{where}.content",
        )
    parts = [_part(part, f"{where}.content[{i}]") for i, part in enumerate(content)]
    return {"type": "message", "role": role, "content": parts}


def _part(part: Any, where: str) -> JSONObject:
    kind = part.get("type") if isinstance(part, dict) else None
    if not isinstance(kind, str):
        raise errors.InvalidRequest(f"{where} must be an object with a type", param=where)
    if kind in _TEXT_PARTS:
        text = _text(part, "text", where)
        return {
            "type": kind,
            "text": text,
            **({"annotations": []} if kind == "output_text" else {}),
        }
    if kind == "refusal":
        return {"type": kind, "refusal": _text(part, "refusal", where)}
    if kind == "input_image":
        url, file_id = part.get("image_url"), part.get("file_id")
        if not (isinstance(url, str) and url) and not (isinstance(file_id, str) and file_id):
            raise errors.InvalidRequest(
                f"{where}: an input_image needs image_url or file_id", param=where
            )
        detail = part.get("detail", "auto")
        if not isinstance(detail, str) or detail not in DETAILS:
            raise errors.InvalidRequest(
                f"{where}.detail must be one of {', '.join(sorted(DETAILS))}",
                param=f"{where}.detail",
            )
        source = {"image_url": url} if isinstance(url, str) and url else {"file_id": file_id}
        return {"type": kind, "detail": detail, **source}
    raise errors.InvalidRequest(
        f"{where}.type must be input_text, output_text, refusal or input_image",
        param=f"{where}.type",
    )


def _text(item: JSONObject, key: str, where: str) -> str:
    value = item.get(key)
    if not isinstance(value, str):
        raise errors.InvalidRequest(f"{where}.{key} must be a string", param=f"{where}.{key}")
    return value
