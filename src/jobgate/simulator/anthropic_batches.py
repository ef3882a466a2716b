"""The simulated Anthropic Message Batches: batches of Messages requests whose lifecycle is
computed from the clock, the results file they leave, and what Anthropic refuses at create.

A batch is `in_progress` from its creation; its requests finish one after another over the
batch's `latency_s` (a request whose params carry `sim` takes its own latency and outcome:
`failed` errors with `api_error`, `rejected` with `invalid_request_error`, `never` never
finishes). It `ended` once every request has succeeded, errored, been canceled or expired;
`request_counts` keep every request in `processing` until then (realistic profile). A cancel
makes it `canceling`, then `ended` with the unfinished requests `canceled`; a request not
finished `expires_after_s` after creation (default 24 hours) is `expired`. The results file
(JSONL, finishing order, not the requests' order: match by `custom_id`) is readable once
the batch has ended, until it is archived 29 days after creation. A succeeded request's
message is what the simulator's Messages endpoint answers for its params.

Refused at create with Anthropic's error shape: an empty or over-long `requests` (at most
100,000), a `custom_id` outside ^[a-zA-Z0-9_-]{1,64}$ or repeated, params Messages refuses
(unknown members, missing `model`, `max_tokens`, `messages`); a body over 256 MB is a 413.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

from jobgate import errors
from jobgate.simulator import parameters, profiles, wire
from jobgate.wire import anthropic_requests, sim
from jobgate.wire.sim import Directives

JSONObject = dict[str, Any]
MAX_REQUESTS = 100_000
MAX_BODY_BYTES = 256 * 1024 * 1024
RESULTS_KEPT_S = 29 * 86_400.0  # results are downloadable this long after creation
CANCEL_GRACE_S = 0.05  # a batch stays `canceling` this long before it ends
LIST_LIMIT = (1, 1000, 20)  # a list page's limit: lowest, highest, default
CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_OUTCOME = {"failed": "errored", "rejected": "rejected"}  # a request's sim outcome


class Refused(Exception):
    """A call Anthropic refuses: `status`, the error `kind` (its `error.type`), `message`."""

    def __init__(self, message: str, *, status: int = 400, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.message = message
        self.status = status
        self.kind = kind


class NotFound(Refused):
    def __init__(self, message: str) -> None:
        super().__init__(message, status=404, kind="not_found_error")


@dataclasses.dataclass(slots=True)
class _Request:
    custom_id: str
    params: JSONObject
    done_at: float | None  # None: never finishes
    outcome: str  # succeeded | errored | rejected (errored, invalid_request_error)
    message_id: str  # the succeeded message's id: the same on every read of the results
    tool_calls: int


@dataclasses.dataclass(slots=True)
class _Batch:
    id: str
    created_at: float
    requests: list[_Request]
    expires_at: float
    cancel_at: float | None = None

    def states(self, now: float) -> list[str]:
        """Each request's state at `now`: processing, succeeded, errored, rejected,
        canceled or expired."""
        states = []
        for item in self.requests:
            done_at = item.done_at
            if done_at is not None and done_at > self.expires_at:
                done_at = None  # does not finish in time
            finished = done_at is not None and now >= done_at
            before_cancel = self.cancel_at is None or (
                done_at is not None and done_at <= self.cancel_at
            )
            if finished and before_cancel:
                states.append(item.outcome)
            elif self.cancel_at is not None and now >= self.cancel_at + CANCEL_GRACE_S:
                states.append("canceled")
            elif now >= self.expires_at:
                states.append("expired")
            else:
                states.append("processing")
        return states

    def ended_at(self, states: list[str]) -> float:
        moments = [
            item.done_at
            for item, state in zip(self.requests, states, strict=True)
            if state not in ("canceled", "expired") and item.done_at is not None
        ]
        if self.cancel_at is not None and "canceled" in states:
            moments.append(self.cancel_at + CANCEL_GRACE_S)
        if "expired" in states:
            moments.append(self.expires_at)
        return max(moments, default=self.created_at)


class MessageBatches:
    """The Message Batches of one simulated Anthropic workspace, timed by `now` (seconds)."""

    def __init__(self, now: Callable[[], float], profile: profiles.SimProfile) -> None:
        self._now = now
        self._profile = profile
        self._batches: dict[str, _Batch] = {}

    def create(self, body: JSONObject, plan: Directives, *, body_bytes: int = 0) -> str:
        """A new batch (raises Refused as Anthropic would). Its requests finish one after
        another over `plan.latency_s`."""
        if body_bytes > MAX_BODY_BYTES:
            raise Refused(
                "Request exceeds the maximum allowed number of bytes.",
                status=413,
                kind="request_too_large",
            )
        requests = body.get("requests")
        if not isinstance(requests, list) or not requests:
            raise Refused("requests: List should have at least 1 item after validation, not 0")
        if len(requests) > MAX_REQUESTS:
            raise Refused(
                f"requests: List should have at most {MAX_REQUESTS} items after validation, "
                f"not {len(requests)}"
            )
        if unknown := sorted(set(body) - {"requests"}):
            raise Refused(f"{unknown[0]}: Extra inputs are not permitted")
        now = self._now()
        seen: set[str] = set()
        made = []
        for index, item in enumerate(requests):
            custom_id, params, item_plan = self._checked(index, item, seen, plan)
            latency_s = item_plan.latency_s
            if item_plan is plan:
                latency_s = plan.latency_s * (index + 1) / len(requests)
            made.append(
                _Request(
                    custom_id,
                    params,
                    None if item_plan.outcome == "never" else now + latency_s,
                    _OUTCOME.get(item_plan.outcome, "succeeded"),
                    wire.new_id("msg_"),
                    item_plan.tool_calls,
                )
            )
        expires_after_s = plan.expires_after_s
        if expires_after_s is None:
            expires_after_s = profiles.BATCH_EXPIRY_S
        batch = _Batch(wire.new_id("msgbatch_"), now, made, now + expires_after_s)
        self._batches[batch.id] = batch
        return batch.id

    def _checked(
        self, index: int, item: Any, seen: set[str], plan: Directives
    ) -> tuple[str, JSONObject, Directives]:
        """The request's custom_id, params and directives (its own `sim`, else the batch's)."""
        where = f"requests.{index}"
        if not isinstance(item, dict):
            raise Refused(f"{where}: Input should be a valid dictionary")
        custom_id = item.get("custom_id")
        if not isinstance(custom_id, str):
            raise Refused(f"{where}.custom_id: Field required")
        if not CUSTOM_ID.match(custom_id):
            raise Refused(f"{where}.custom_id: String should match pattern '{CUSTOM_ID.pattern}'")
        if custom_id in seen:
            raise Refused(
                f"{where}.custom_id: Duplicate custom_id '{custom_id}': each request in a "
                "Message Batch needs a unique custom_id"
            )
        seen.add(custom_id)
        if unknown := sorted(set(item) - {"custom_id", "params"}):
            raise Refused(f"{where}.{unknown[0]}: Extra inputs are not permitted")
        params = item.get("params")
        if not isinstance(params, dict):
            raise Refused(f"{where}.params: Field required")
        try:
            item_plan = sim.directives(params) if "sim" in params else plan
        except errors.InvalidRequest as exc:  # the simulator's own member
            raise Refused(f"{where}.params.sim: {exc.message}") from None
        checked = {k: v for k, v in params.items() if k != "sim"}
        if self._profile.strict_parameters:
            found = parameters.unknown("/v1/messages", checked, where=f"{where}.params.")
            if found is not None:
                raise Refused(found.message)
        problem = anthropic_requests.validate_messages(checked)
        if problem is not None:
            raise Refused(f"{where}.params.{problem}")
        problem = sim.tool_calls_problem(item_plan, checked)
        if problem is not None:
            raise Refused(f"{where}.params.{problem}")
        return custom_id, params, item_plan

    def retrieve(self, batch_id: str, *, base_url: str) -> JSONObject:
        batch = self._found(batch_id)
        now = self._now()
        states = batch.states(now)
        counts: dict[str, int] = {}
        for state in states:
            key = "errored" if state == "rejected" else state
            counts[key] = counts.get(key, 0) + 1
        ended = counts.get("processing", 0) == 0
        if not ended and self._profile.batch_counts_at_end:
            counts = {"processing": len(states)}  # out of `processing` only at the end
        archived_at = batch.created_at + RESULTS_KEPT_S
        status = "ended" if ended else "canceling" if batch.cancel_at is not None else "in_progress"
        answer = wire.message_batch(
            batch_id=batch.id,
            created_at=batch.created_at,
            expires_at=batch.expires_at,
            processing_status=status,
            counts=counts,
            ended_at=batch.ended_at(states) if ended else None,
            cancel_initiated_at=batch.cancel_at,
            results_url=f"{base_url}/v1/messages/batches/{batch.id}/results" if ended else None,
        )
        if now >= archived_at:
            answer["archived_at"] = wire.rfc3339(archived_at)
        return answer

    def page(
        self, *, before_id: str | None, after_id: str | None, limit: int, base_url: str
    ) -> JSONObject:
        """A page of the batches, newest first: after `after_id` (older ones), or before
        `before_id` (newer ones)."""
        ids = list(reversed(self._batches))
        if before_id is not None:
            ids = ids[: ids.index(before_id)] if before_id in ids else []
            chosen = ids[-limit:]
        else:
            if after_id is not None:
                ids = ids[ids.index(after_id) + 1 :] if after_id in ids else []
            chosen = ids[:limit]
        return {
            "data": [self.retrieve(batch_id, base_url=base_url) for batch_id in chosen],
            "has_more": len(ids) > limit,
            "first_id": chosen[0] if chosen else None,
            "last_id": chosen[-1] if chosen else None,
        }

    def cancel(self, batch_id: str, *, base_url: str) -> JSONObject:
        """Start canceling a batch in progress; an ended one is refused (realistic) or
        answered as it is (lenient)."""
        batch = self._found(batch_id)
        running = "processing" in batch.states(self._now())
        if not running and batch.cancel_at is None and self._profile.cancel_finished_refused:
            raise Refused(f"Batch {batch_id} has already ended and cannot be canceled.")
        if batch.cancel_at is None and running:
            batch.cancel_at = self._now()
        return self.retrieve(batch_id, base_url=base_url)

    def results(self, batch_id: str) -> list[JSONObject]:
        """The results file's lines, in the order the requests finished (canceled and
        expired ones last); refused before the batch has ended and once it is archived."""
        batch = self._found(batch_id)
        now = self._now()
        states = batch.states(now)
        if "processing" in states:
            raise NotFound(f"Batch {batch_id} has not ended: no results yet.")
        if now >= batch.created_at + RESULTS_KEPT_S:
            raise NotFound(f"The results of batch {batch_id} are no longer available.")
        order = sorted(
            range(len(states)),
            key=lambda i: (
                states[i] in ("canceled", "expired"),
                batch.requests[i].done_at or 0.0,
                i,
            ),
        )
        return [self._line(batch.requests[i], states[i]) for i in order]

    @staticmethod
    def _line(item: _Request, state: str) -> JSONObject:
        if state == "succeeded":
            params = {k: v for k, v in item.params.items() if k != "sim"}
            message = wire.anthropic_message(
                params, message_id=item.message_id, tool_calls=item.tool_calls
            )
            result = {"type": "succeeded", "message": message}
            return {"custom_id": item.custom_id, "result": result}
        return wire.batch_result(item.custom_id, state, item.params)

    def delete(self, batch_id: str) -> JSONObject:
        """Delete an ended batch (one in progress must be canceled first)."""
        batch = self._found(batch_id)
        if "processing" in batch.states(self._now()):
            raise Refused(
                f"Batch {batch_id} cannot be deleted while it is processing; cancel it first."
            )
        del self._batches[batch_id]
        return {"id": batch_id, "type": "message_batch_deleted"}

    def _found(self, batch_id: str) -> _Batch:
        batch = self._batches.get(batch_id)
        if batch is None:
            raise NotFound(f"No message batch with id {batch_id}.")
        return batch
