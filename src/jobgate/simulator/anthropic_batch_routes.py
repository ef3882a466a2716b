"""The simulator's Anthropic Message Batches routes, over the engine's `MessageBatches`:
`POST /v1/messages/batches`, `GET /v1/messages/batches` (`before_id`, `after_id`, `limit`),
`GET /v1/messages/batches/{id}`, `POST /v1/messages/batches/{id}/cancel`,
`GET /v1/messages/batches/{id}/results` (JSONL) and `DELETE /v1/messages/batches/{id}`.
A create's directives (`x-jobgate-sim`, or a `sim` member of the body) may fail it
(`fail_with`, `fail_times`) or accept it and drop the answer (`fail_with: drop`: the batch
exists, the caller never hears of it); an Idempotency-Key replays the first answer on an
idempotent simulator.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import orjson

from jobgate import errors
from jobgate.simulator import wire
from jobgate.simulator.anthropic_batches import LIST_LIMIT, Refused
from jobgate.simulator.engine import SimEngine, replay_key, request_key
from jobgate.simulator.http11 import Answer, Drop, Reply, Request
from jobgate.wire import sim
from jobgate.wire.sim import Directives

FaultAnswer = Callable[[str, Directives], Answer]
ROOT = "/v1/messages/batches"
_BATCH = re.compile(r"^/v1/messages/batches/([\w-]+)(/cancel|/results)?$")


def serves(path: str) -> bool:
    return path == ROOT or _BATCH.match(path) is not None


def route(
    engine: SimEngine,
    request: Request,
    body: dict[str, Any],
    fault_answer: FaultAnswer,
    *,
    base_url: str,
) -> Answer:
    method, path = request.method, request.path
    state = engine.message_batches
    try:
        if method == "POST" and path == ROOT:
            return _create(engine, request, body, fault_answer, base_url)
        if method == "GET" and path == ROOT:
            return Reply.json(200, state.page(**_page_query(request.query), base_url=base_url))
        found = _BATCH.match(path)
        if found is not None:
            batch_id, action = found.group(1), found.group(2)
            if method == "GET" and action is None:
                return Reply.json(200, state.retrieve(batch_id, base_url=base_url))
            if method == "DELETE" and action is None:
                return Reply.json(200, state.delete(batch_id))
            if method == "POST" and action == "/cancel":
                engine.cancel_calls.append(batch_id)
                return Reply.json(200, state.cancel(batch_id, base_url=base_url))
            if method == "GET" and action == "/results":
                lines = state.results(batch_id)
                payload = b"".join(orjson.dumps(line) + b"\n" for line in lines)
                return Reply(200, payload, {"content-type": "application/binary"})
    except Refused as exc:
        return error(exc.status, exc.kind, exc.message)
    return error(404, "not_found_error", f"no route {method} {path}")


def _create(
    engine: SimEngine,
    request: Request,
    body: dict[str, Any],
    fault_answer: FaultAnswer,
    base_url: str,
) -> Answer:
    try:
        plan = _plan(request, body)
    except errors.InvalidRequest as exc:
        raise Refused(exc.message) from None
    idempotency_key = request.headers.get("idempotency-key")
    key = replay_key("batches", idempotency_key)
    replayed = engine.replay(key)
    if replayed is not None:
        return Reply.json(replayed[0], replayed[1], {"idempotent-replayed": "true"})
    call_number = engine.count_call(request_key("batches", idempotency_key, body))
    fault = plan.fail_with if plan.fails_on(call_number) else None
    if fault is not None and fault != "drop":
        return fault_answer(fault, plan)
    state = engine.message_batches
    batch_id = state.create(body, plan, body_bytes=len(request.body))
    engine.created.append(batch_id)
    batch = state.retrieve(batch_id, base_url=base_url)
    engine.remember(key, 200, batch)
    # `drop`: the batch exists, and the answer is lost on the way back.
    return Drop() if fault == "drop" else Reply.json(200, batch)


def _plan(request: Request, body: dict[str, Any]) -> Directives:
    """The create's directives: the `x-jobgate-sim` header, else the body's `sim` (taken out
    of the body either way; raises errors.InvalidRequest)."""
    raw = body.pop("sim", None)
    header = request.headers.get("x-jobgate-sim")
    if header:
        try:
            raw = orjson.loads(header)
        except orjson.JSONDecodeError as exc:
            raise errors.InvalidRequest("x-jobgate-sim is not JSON", param="sim") from exc
    return sim.directives({} if raw is None else {"sim": raw})


def _page_query(query: dict[str, str]) -> dict[str, Any]:
    low, high, default = LIST_LIMIT
    try:
        limit = int(query.get("limit", default))
    except ValueError:
        raise Refused("limit: Input should be a valid integer") from None
    if not low <= limit <= high:
        raise Refused(f"limit: must be from {low} to {high}")
    before_id, after_id = query.get("before_id") or None, query.get("after_id") or None
    if before_id is not None and after_id is not None:
        raise Refused("before_id and after_id cannot both be given")
    return {"before_id": before_id, "after_id": after_id, "limit": limit}


def error(status: int, kind: str, message: str) -> Reply:
    """Anthropic's error body: `{"type": "error", "error": {"type", "message"}, "request_id"}`."""
    body = {
        "type": "error",
        "error": {"type": kind, "message": message},
        "request_id": wire.new_id("req_"),
    }
    return Reply.json(status, body)
