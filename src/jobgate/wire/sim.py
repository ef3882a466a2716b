"""The `sim` directives: what a request body asks of the simulated model (the in-process `sim`
provider and the `jobgate simulator` server both read them here). A body may carry a `sim`
object; the provider adapters move it into the `x-jobgate-sim` header, so the body they send
stays valid for the real providers (a native batch line, which has no header of its own, keeps
it only for an upstream configured with `sim_directives`). Its members:

- `latency_s`: how long the call (or, in background mode, the provider-side run) takes;
- `fail_with`: `rate_limit`, `quota` (out of quota / over a spend limit: a 429 that is
  billing), `server_error`, `overloaded`, `invalid_request`, `hang` (never answer), `drop`
  (accept the request, then close the connection without an answer); or, inside a streamed
  answer (a 200 first, the fault `cut_at` through its text, in the provider's exact shape:
  simulator.stream_faults), `stream_rate_limit`, `stream_server_error`, `stream_overloaded`,
  `stream_quota`, `stream_stall` (nothing more is sent); a request that does not stream gets
  the same fault as an HTTP answer;
- `fail_times`: how many calls fail before one succeeds (default: all of them);
- `retry_after_s`: for `rate_limit` (default 1; sent as `retry-after-ms` and `retry-after`);
- `outcome`: how a background run ends: `completed` (default), `failed` (a server error),
  `rejected` (failed for good: an invalid request), `incomplete`, `never`;
- `webhooks`: `send` (default), `none` (lost), `duplicate`, `out_of_order` (a stale
  contradicting event after the real one), `early` (the event before the create's answer);
- `cancel`: `supported` (default) or `unsupported` (the provider has no cancel endpoint);
- `cut_at`: where in a streamed answer's text a stream fault comes, as a fraction of its
  deltas (default 0.5, above 0 and below 1);
- `chunks`: in how many deltas a streamed answer arrives, spread evenly over `latency_s`
  (default 10, at most MAX_CHUNKS);
- `progress`: `true` makes a running background response carry a `progress` fraction that
  grows over `latency_s` (default `false`: OpenAI's background responses report none);
- `tool_calls`: how many function calls follow the answer's text (default 0, at most
  MAX_TOOL_CALLS), each to one of the request's function tools in turn (a request with none
  is refused: a model calls only the tools it was given).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from jobgate import errors
from jobgate.wire import content

JSONObject = dict[str, Any]
FAULTS = ("rate_limit", "quota", "server_error", "overloaded", "invalid_request", "hang", "drop")
STREAM_FAULTS = (
    "stream_rate_limit",
    "stream_server_error",
    "stream_overloaded",
    "stream_quota",
    "stream_stall",
)
OUTCOMES = ("completed", "failed", "rejected", "incomplete", "never")
WEBHOOK_MODES = ("send", "none", "duplicate", "out_of_order", "early")
CANCEL_MODES = ("supported", "unsupported")
_FIELDS = frozenset(
    {
        "latency_s",
        "fail_with",
        "fail_times",
        "retry_after_s",
        "outcome",
        "webhooks",
        "cancel",
        "chunks",
        "progress",
        "tool_calls",
        "expires_after_s",
        "cut_at",
    }
)
DEFAULT_CHUNKS = 10
MAX_CHUNKS = 10_000
MAX_TOOL_CALLS = 16


@dataclasses.dataclass(frozen=True, slots=True)
class Directives:
    latency_s: float = 0.0
    fail_with: str | None = None
    fail_times: int | None = None  # None: every call fails
    retry_after_s: float = 1.0
    outcome: str = "completed"
    webhooks: str = "send"
    cancel: str = "supported"
    chunks: int = DEFAULT_CHUNKS  # deltas of a streamed answer (live output streaming)
    progress: bool = False  # a running background response reports a `progress` fraction
    tool_calls: int = 0  # function calls after the text, to the request's function tools
    # A batch's requests not finished this long after its creation expire (None: the
    # provider's 24 hours); with `latency_s` spread over the requests, a batch expires part done.
    expires_after_s: float | None = None
    cut_at: float = 0.5  # a stream fault comes after this fraction of the deltas

    def cut_index(self, deltas: int) -> int:
        """The index of the delta a stream fault replaces, of `deltas`."""
        return int(deltas * self.cut_at)

    def fails_on(self, call_number: int) -> bool:
        """Whether the `call_number`-th call (1-based) fails."""
        if self.fail_with is None:
            return False
        return self.fail_times is None or call_number <= self.fail_times


_PLAIN = Directives()  # a body without `sim` (frozen: one shared instance serves them all)


def without(body: Mapping[str, Any]) -> JSONObject:
    """`body` without its `sim` object: what a real provider is sent."""
    return {key: value for key, value in body.items() if key != "sim"}


def directives(body: JSONObject) -> Directives:
    """Read and check the `sim` object; raises errors.InvalidRequest naming the bad field."""
    raw = body.get("sim")
    if raw is None:
        return _PLAIN
    if not isinstance(raw, dict):
        raise errors.InvalidRequest("body.sim must be an object", param="body.sim")
    unknown = set(raw) - _FIELDS
    if unknown:
        raise errors.InvalidRequest(
            f"unknown body.sim field {sorted(unknown)[0]!r}", param="body.sim"
        )
    latency = _number(raw, "latency_s", 0.0)
    retry_after = _number(raw, "retry_after_s", 1.0)
    fail_with = raw.get("fail_with")
    if fail_with is not None:
        _choice(raw, "fail_with", FAULTS + STREAM_FAULTS)
    fail_times = raw.get("fail_times")
    if fail_times is not None and (
        isinstance(fail_times, bool) or not isinstance(fail_times, int) or fail_times < 0
    ):
        raise errors.InvalidRequest(
            "body.sim.fail_times must be a non-negative integer", param="body.sim.fail_times"
        )
    chunks = raw.get("chunks", DEFAULT_CHUNKS)
    if isinstance(chunks, bool) or not isinstance(chunks, int) or not 1 <= chunks <= MAX_CHUNKS:
        raise errors.InvalidRequest(
            f"body.sim.chunks must be an integer from 1 to {MAX_CHUNKS}", param="body.sim.chunks"
        )
    progress = raw.get("progress", False)
    if not isinstance(progress, bool):
        raise errors.InvalidRequest(
            "body.sim.progress must be true or false", param="body.sim.progress"
        )
    tool_calls = raw.get("tool_calls", 0)
    if (
        isinstance(tool_calls, bool)
        or not isinstance(tool_calls, int)
        or not 0 <= tool_calls <= MAX_TOOL_CALLS
    ):
        raise errors.InvalidRequest(
            f"body.sim.tool_calls must be an integer from 0 to {MAX_TOOL_CALLS}",
            param="body.sim.tool_calls",
        )
    expires_after = raw.get("expires_after_s")
    if expires_after is not None:
        expires_after = _number(raw, "expires_after_s", 0.0)
    cut_at = raw.get("cut_at", 0.5)
    if isinstance(cut_at, bool) or not isinstance(cut_at, int | float) or not 0 < cut_at < 1:
        raise errors.InvalidRequest(
            "body.sim.cut_at must be a number above 0 and below 1", param="body.sim.cut_at"
        )
    return Directives(
        latency,
        fail_with,
        fail_times,
        retry_after,
        outcome=_choice(raw, "outcome", OUTCOMES),
        webhooks=_choice(raw, "webhooks", WEBHOOK_MODES),
        cancel=_choice(raw, "cancel", CANCEL_MODES),
        chunks=chunks,
        progress=progress,
        tool_calls=tool_calls,
        expires_after_s=expires_after,
        cut_at=float(cut_at),
    )


def _choice(raw: JSONObject, field: str, allowed: tuple[str, ...]) -> str:
    value = raw.get(field, allowed[0])
    if value not in allowed:
        raise errors.InvalidRequest(
            f"body.sim.{field} must be one of {', '.join(allowed)}", param=f"body.sim.{field}"
        )
    return str(value)


def _number(raw: JSONObject, field: str, default: float) -> float:
    value = raw.get(field, default)
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
    ):
        raise errors.InvalidRequest(
            f"body.sim.{field} must be a non-negative number", param=f"body.sim.{field}"
        )
    return float(value)


def tool_calls_problem(plan: Directives, body: JSONObject) -> str | None:
    """Why `sim.tool_calls` cannot be honoured for `body`, or None (a model calls only the
    tools it was given)."""
    if plan.tool_calls and not content.tool_names(body):
        return "sim.tool_calls: the request declares no function tool to call"
    return None
