"""The simulated provider's state: background responses, message batches, idempotent creates
and the webhooks they owe. One engine serves both the in-process `sim` provider and the
`jobgate simulator` HTTP server, so the two cannot drift.

Everything is computed from the clock, lazily: a background response created at t with
`latency_s = L` is `queued`, then `in_progress`, then terminal from t + L on. A FakeClock
therefore drives the whole lifecycle in unit tests without sleeping.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from typing import Any

import orjson

from jobgate.clock import Clock, SystemClock
from jobgate.simulator import profiles, wire
from jobgate.simulator.anthropic_batches import MessageBatches
from jobgate.simulator.openai_batches import OpenAIBatches
from jobgate.simulator.profiles import SimProfile
from jobgate.wire.sim import Directives

JSONObject = dict[str, Any]
TERMINAL = frozenset({"completed", "failed", "incomplete", "cancelled"})
STALE_EVENT_DELAY_S = 0.05  # how long after the real event an out-of-order stale one follows
_OUTCOME_EVENT = {
    "completed": "response.completed",
    "failed": "response.failed",
    "incomplete": "response.incomplete",
    "cancelled": "response.cancelled",
}


class CancelRefused(Exception):
    """The provider refuses to cancel an object that has already finished (realistic
    profile): OpenAI answers 400 "Cannot cancel a completed response"."""


@dataclasses.dataclass(frozen=True, slots=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: JSONObject | None
    at: float


@dataclasses.dataclass(slots=True)
class Outgoing:
    """A webhook the simulated provider owes: sent at `due_at`, signed with `webhook_id`."""

    webhook_id: str
    event: JSONObject
    due_at: float
    before_answer: bool = False  # `early`: delivered before the create call is answered


@dataclasses.dataclass(slots=True)
class _Response:
    id: str
    body: JSONObject
    plan: Directives
    created_at: float
    done_at: float | None  # None: never finishes (`outcome: never`)
    background: bool
    cancelled_at: float | None = None

    def status(self, now: float) -> str:
        if self.cancelled_at is not None:
            return "cancelled"
        if self.done_at is not None and now >= self.done_at:
            return "failed" if self.plan.outcome == "rejected" else self.plan.outcome
        return "in_progress" if now > self.created_at else "queued"

    def progress(self, now: float) -> float | None:
        """The fraction done while running, for `sim.progress`: elapsed / latency_s, below 1
        until the run ends; None when not asked for, or when the run never ends."""
        if not self.plan.progress or self.done_at is None:
            return None
        span = self.done_at - self.created_at
        if span <= 0:
            return None
        return min(max((now - self.created_at) / span, 0.0), 0.99)


def request_key(route: str, idempotency_key: str | None, body: Mapping[str, Any]) -> str:
    """What counts calls for `fail_times`: the Idempotency-Key, else the body's digest."""
    if idempotency_key:
        return f"{route}:key:{idempotency_key}"
    digest = hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()
    return f"{route}:body:{digest}"


def replay_key(route: str, idempotency_key: str | None) -> str | None:
    """Where a create's answer is remembered: only under an explicit Idempotency-Key."""
    return f"{route}:key:{idempotency_key}" if idempotency_key else None


class SimEngine:
    def __init__(
        self,
        clock: Clock | None = None,
        *,
        idempotent: bool | None = None,
        profile: SimProfile | None = None,
    ) -> None:
        self._clock = clock or SystemClock()
        chosen = profile or profiles.profile()
        if idempotent is not None:
            chosen = dataclasses.replace(chosen, idempotent=idempotent)
        self.profile = chosen
        self.idempotent = chosen.idempotent  # replay a create's answer for a repeated key
        self.requests: list[RecordedRequest] = []
        self.created: list[str] = []  # every object the provider accepted: billed work
        self.created_background: list[str] = []  # the responses created in background mode
        self.cancel_calls: list[str] = []
        self._calls: dict[str, int] = {}
        self._answers: dict[str, tuple[int, JSONObject]] = {}
        self._responses: dict[str, _Response] = {}
        self._outbox: list[Outgoing] = []
        self.openai_batches = OpenAIBatches(self.now)  # OpenAI Files and Batch API
        self.message_batches = MessageBatches(self.now, chosen)  # Anthropic Message Batches

    def now(self) -> float:
        return self._clock.now().timestamp()

    # -- bookkeeping shared by every create -------------------------------------------------

    def record(self, method: str, path: str, headers: dict[str, str], body: Any) -> None:
        self.requests.append(
            RecordedRequest(
                method, path, headers, body if isinstance(body, dict) else None, self.now()
            )
        )

    def count_call(self, key: str) -> int:
        """The 1-based number of this call among calls with the same key."""
        self._calls[key] = self._calls.get(key, 0) + 1
        return self._calls[key]

    def replay(self, key: str | None) -> tuple[int, JSONObject] | None:
        """The stored answer of an earlier create with this Idempotency-Key (idempotent
        engines only; a request without a key is never deduplicated)."""
        return self._answers.get(key) if self.idempotent and key else None

    def remember(self, key: str | None, status: int, body: JSONObject) -> None:
        if self.idempotent and key and 200 <= status < 300:
            self._answers[key] = (status, body)

    # -- OpenAI Responses ------------------------------------------------------------------

    def create_response(self, body: JSONObject, plan: Directives, *, background: bool) -> str:
        now = self.now()
        response_id = wire.new_id("resp_")
        latency = 0.0 if plan.webhooks == "early" else plan.latency_s
        done_at = None if plan.outcome == "never" else now + latency
        run = _Response(response_id, body, plan, now, done_at, background)
        self._responses[response_id] = run
        self.created.append(response_id)
        if background:
            self.created_background.append(response_id)
        if background and done_at is not None:
            outcome = "failed" if plan.outcome == "rejected" else plan.outcome
            self._schedule(run, _OUTCOME_EVENT[outcome], done_at)
        return response_id

    def response(self, response_id: str, *, as_created: bool = False) -> JSONObject | None:
        """The response as it stands now; `as_created`: as a background create answers it
        (`queued`, whatever happened since)."""
        run = self._responses.get(response_id)
        if run is None:
            return None
        status = "queued" if as_created else run.status(self.now())
        completed_at = None
        if status in TERMINAL:
            completed_at = run.cancelled_at if status == "cancelled" else run.done_at
        answer = wire.response_object(
            run.body,
            response_id=run.id,
            created_at=run.created_at,
            status=status,
            completed_at=completed_at,
            background=run.background,
            error_code="invalid_prompt" if run.plan.outcome == "rejected" else "server_error",
            tool_calls=run.plan.tool_calls,
        )
        if status in ("queued", "in_progress"):
            fraction = run.progress(self.now())
            if fraction is not None:
                answer["progress"] = round(fraction, 4)
        return answer

    def seconds_until_done(self, response_id: str) -> float:
        """How long, by this engine's clock, until the response is terminal: 0 when it is (or
        is unknown, or never ends: nothing to wait for)."""
        run = self._responses.get(response_id)
        if run is None or run.done_at is None:
            return 0.0
        return max(0.0, run.done_at - self.now())

    def response_plan(self, response_id: str) -> Directives | None:
        run = self._responses.get(response_id)
        return None if run is None else run.plan

    def cancel_response(self, response_id: str) -> JSONObject | None:
        """Cancel a background response that has not finished. A finished one raises
        CancelRefused (realistic) or is answered as it is (lenient). None when unknown."""
        run = self._responses.get(response_id)
        if run is None:
            return None
        self.cancel_calls.append(response_id)
        now = self.now()
        status = run.status(now)
        if status in TERMINAL and self.profile.cancel_finished_refused and status != "cancelled":
            raise CancelRefused(f"Cannot cancel a {status} response.")
        if status not in TERMINAL:
            run.cancelled_at = now
            self._outbox = [o for o in self._outbox if o.event["data"]["id"] != response_id]
            self._schedule(run, "response.cancelled", now)
        return self.response(response_id)

    def _schedule(self, run: _Response, event_type: str, at: float) -> None:
        mode = run.plan.webhooks
        if mode == "none":
            return
        event = wire.response_event(event_type, run.id, at)
        webhook_id = f"wh_{event['id'].removeprefix('evt_')}"
        self._outbox.append(Outgoing(webhook_id, event, at, before_answer=mode == "early"))
        if mode == "duplicate":
            self._outbox.append(Outgoing(webhook_id, event, at))
        elif mode == "out_of_order":
            stale_type = (
                "response.failed" if event_type != "response.failed" else "response.completed"
            )
            stale = wire.response_event(stale_type, run.id, at - 1)
            stale_id = f"wh_{stale['id'].removeprefix('evt_')}"
            self._outbox.append(Outgoing(stale_id, stale, at + STALE_EVENT_DELAY_S))

    # -- webhooks owed ---------------------------------------------------------------------

    def due_webhooks(self, *, early_for: str | None = None) -> list[Outgoing]:
        """Take the webhooks due now (or, with early_for, the early ones of one response)."""
        now = self.now()
        if early_for is not None:
            due = [
                o for o in self._outbox if o.before_answer and o.event["data"]["id"] == early_for
            ]
        else:
            due = [o for o in self._outbox if o.due_at <= now and not o.before_answer]
        self._outbox = [o for o in self._outbox if o not in due]
        return due

    def next_webhook_at(self) -> float | None:
        pending = [o.due_at for o in self._outbox if not o.before_answer]
        return min(pending, default=None)
