"""The simulator's OpenAI Files and Batch API routes, over the engine's `OpenAIBatches`:
`POST /v1/files` (multipart, purpose `batch`), `GET /v1/files/{id}` and `/content`,
`POST /v1/batches`, `GET /v1/batches` (`after`, `limit`), `GET /v1/batches/{id}`,
`POST /v1/batches/{id}/cancel`. A create's directives (`x-jobgate-sim`) may fail it
(`fail_with`, `fail_times`) or accept it and drop the answer (`fail_with: drop`: the batch
exists, the caller never hears of it).
"""

from __future__ import annotations

import email.parser
import email.policy
import re
from collections.abc import Callable
from email.message import Message
from typing import Any

import orjson

from jobgate import errors
from jobgate.simulator import wire
from jobgate.simulator.engine import SimEngine, request_key
from jobgate.simulator.http11 import Answer, Drop, Reply, Request
from jobgate.simulator.openai_batches import LIST_LIMIT, Refused
from jobgate.wire import sim
from jobgate.wire.sim import Directives

FaultAnswer = Callable[[str, Directives], Answer]
_FILE = re.compile(r"^/v1/files/([\w-]+)(/content)?$")
_BATCH = re.compile(r"^/v1/batches/([\w-]+)(/cancel)?$")


def serves(path: str) -> bool:
    return path == "/v1/files" or path.startswith(("/v1/files/", "/v1/batches"))


def route(
    engine: SimEngine, request: Request, plan: Directives, fault_answer: FaultAnswer
) -> Answer:
    method, path = request.method, request.path
    state = engine.openai_batches
    try:
        if method == "POST" and path == "/v1/files":
            return Reply.json(200, _upload(engine, request))
        if method == "POST" and path == "/v1/batches":
            return _create(engine, request, plan, fault_answer)
        if method == "GET" and path == "/v1/batches":
            return Reply.json(200, state.page(**_page_query(request.query)))
        if (found := _FILE.match(path)) is not None and method == "GET":
            if found.group(2):
                content = state.file_content(found.group(1))
                if content is None:
                    return _error("not_found", f"No such File object: {found.group(1)}")
                return Reply(200, content, {"content-type": "application/octet-stream"})
            return _found(state.file(found.group(1)))
        if (found := _BATCH.match(path)) is not None:
            if method == "GET" and not found.group(2):
                return _found(state.retrieve(found.group(1)))
            if method == "POST" and found.group(2):
                engine.cancel_calls.append(found.group(1))
                return _found(state.cancel(found.group(1)))
    except Refused as exc:
        return _error("invalid_request", exc.message, param=exc.param)
    return _error("not_found", f"no route {method} {path}")


def _create(
    engine: SimEngine, request: Request, plan: Directives, fault_answer: FaultAnswer
) -> Answer:
    body = request.json()
    if not isinstance(body, dict):
        raise Refused("the body must be a JSON object")
    key = request_key("openai-batches", request.headers.get("idempotency-key"), body)
    fault = plan.fail_with if plan.fails_on(engine.count_call(key)) else None
    if fault is not None and fault != "drop":
        return fault_answer(fault, plan)
    batch_id = engine.openai_batches.create(body, plan)
    engine.created.append(batch_id)
    if fault == "drop":
        return Drop()  # created, and the answer lost on the way back
    return Reply.json(200, engine.openai_batches.retrieve(batch_id, as_created=True))


def _upload(engine: SimEngine, request: Request) -> dict[str, Any]:
    parts = _form(request)
    upload = parts.get("file")
    purpose = parts.get("purpose")
    if upload is None or purpose is None:
        raise Refused("a multipart form with `file` and `purpose` is required", "file")
    data = upload.get_payload(decode=True)
    purpose_text = purpose.get_payload(decode=True)
    if not isinstance(data, bytes) or not isinstance(purpose_text, bytes):
        raise Refused("a multipart form with `file` and `purpose` is required", "file")
    filename = upload.get_filename() or "upload.jsonl"
    return engine.openai_batches.upload(filename, purpose_text.decode(), data)


def _form(request: Request) -> dict[str, Message]:
    """A multipart/form-data body's parts by name (none if the body is not one)."""
    content_type = request.headers.get("content-type", "")
    if not content_type.startswith("multipart/form-data"):
        return {}
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode()
    parsed = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + request.body)
    parts: dict[str, Message] = {}
    if parsed.is_multipart():
        for part in parsed.get_payload():
            assert isinstance(part, Message)
            name = part.get_param("name", header="content-disposition")
            if isinstance(name, str):
                parts[name] = part
    return parts


def _page_query(query: dict[str, str]) -> dict[str, Any]:
    low, high, default = LIST_LIMIT
    try:
        limit = int(query.get("limit", default))
    except ValueError:
        raise Refused("limit must be an integer", "limit") from None
    if not low <= limit <= high:
        raise Refused(f"limit must be from {low} to {high}", "limit")
    return {"after": query.get("after") or None, "limit": limit}


def plan_of(request: Request) -> Directives:
    """The directives in the `x-jobgate-sim` header (raises errors.InvalidRequest)."""
    header = request.headers.get("x-jobgate-sim")
    if not header:
        return Directives()
    try:
        return sim.directives({"sim": orjson.loads(header)})
    except orjson.JSONDecodeError as exc:
        raise errors.InvalidRequest("x-jobgate-sim is not JSON", param="sim") from exc


def _found(body: dict[str, Any] | None) -> Answer:
    return _error("not_found", "No such object") if body is None else Reply.json(200, body)


def _error(fault: str, message: str, *, param: str | None = None) -> Reply:
    return Reply.json(wire.FAULT_STATUS[fault][0], wire.openai_error(fault, message, param=param))
