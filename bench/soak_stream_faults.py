"""The soak's stream faults (`--stream-faults SHARE`): that share of the streaming jobs is
streamed over HTTP from the provider simulator, as OpenAI Chat Completions, an OpenAI Responses
create or Anthropic Messages, and carries a fault the simulator reports inside the 200's stream
halfway through its text (`sim.fail_with`: `stream_rate_limit`, `stream_server_error`,
`stream_overloaded`, `stream_quota`, `stream_stall`, docs/providers.md), through the real
adapters. A retryable fault fails the job's first one to three calls (its `fail_times`) or, for
a share of them, every call (those jobs ask for 3 attempts, so that they end within the run).
Once everything settled it checks, for each such job (each count must be 0):

- its outcome is its fault's class: a retryable fault that ended succeeds, or fails counted
  (every attempt spent, not as quota); one that fails every call fails counted; a quota fault
  fails as `insufficient_quota`, not retried as a rate limit;
- the upstream calls it drew (the simulator's request log, by the Idempotency-Key jobgate
  sends: the job id) stay bounded: at most `CALLS_PER_MINUTE` in any minute;
- and, as for every succeeded streaming job (bench/soak_checks.py `check_streams`), the text it
  streamed (after the last reset) equals its final text.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import random
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

OPENAI = "faulty"  # sync Chat Completions and Responses at the simulator
ANTHROPIC = "faulty_claude"  # sync Messages at the simulator
CHAT, RESPONSES, MESSAGES = "/v1/chat/completions", "/v1/responses", "/v1/messages"
ROUTES = ((OPENAI, CHAT), (OPENAI, RESPONSES), (ANTHROPIC, MESSAGES))
FAULTS = (
    "stream_rate_limit",
    "stream_server_error",
    "stream_overloaded",
    "stream_quota",
    "stream_stall",
)
ALWAYS_SHARE = 0.2  # of the retryable faults: every call fails, so the job fails counted
ALWAYS_MAX_ATTEMPTS = 3  # the max_attempts of a job whose every call fails
STALL_TIMEOUT_S = 1  # a job's stall_timeout_s (the least it may ask)
# Rate limits wait at least a second and other faults are counted attempts: one job draws at
# most a call a second (docs/providers.md), whatever the provider answers.
CALLS_PER_MINUTE = 60
JOBS = "SELECT id, state, attempt, max_attempts, error FROM jobs WHERE id = ANY($1::text[])"


@dataclasses.dataclass(frozen=True, slots=True)
class Planned:
    fault: str
    provider: str
    fail_times: int | None  # None: every call fails
    endpoint: str = CHAT

    @property
    def expected(self) -> str:
        """The outcome class: succeeded (or failed counted), failed counted, or quota."""
        if self.fault == "stream_quota":
            return "quota"
        return "failed_counted" if self.fail_times is None else "succeeded"


def plan(rng: random.Random) -> Planned:
    fault = rng.choice(FAULTS)
    provider, endpoint = rng.choice(ROUTES)
    if fault == "stream_quota" or rng.random() < ALWAYS_SHARE:
        return Planned(fault, provider, None, endpoint)
    return Planned(fault, provider, rng.randint(1, 3), endpoint)


def job(planned: Planned, content: str, chunks: int) -> dict[str, Any]:
    """The submit body of a streaming job that meets `planned`'s fault."""
    sim: dict[str, Any] = {"fail_with": planned.fault, "chunks": chunks, "latency_s": 0.1}
    if planned.fail_times is not None:
        sim["fail_times"] = planned.fail_times
    if planned.fault == "stream_rate_limit":
        sim["retry_after_s"] = 1
    messages = [{"role": "user", "content": content}]
    if planned.endpoint == MESSAGES:
        body = {"model": "claude-sim", "max_tokens": 256, "messages": messages, "sim": sim}
    elif planned.endpoint == RESPONSES:
        body = {"model": "gpt-4.1-mini", "input": content, "sim": sim}
    else:
        body = {"model": "gpt-4.1-mini", "messages": messages, "sim": sim}
    submit: dict[str, Any] = {
        "provider": planned.provider,
        "endpoint": planned.endpoint,
        "body": body,
        "stream": True,
    }
    if planned.fault == "stream_stall":
        submit["stall_timeout_s"] = STALL_TIMEOUT_S
    if planned.fail_times is None and planned.fault != "stream_quota":
        submit["max_attempts"] = ALWAYS_MAX_ATTEMPTS
    return submit


def config(simulator_url: str) -> str:
    """The two providers' jobgate.toml sections. They fail a large share of calls on purpose:
    their breakers open only after many failures in a row and probe again within a second
    (else the jobs failing every call would hold the others for minutes behind a breaker
    doubling its wait; the breaker has tests of its own)."""
    common = (
        'mode = "sync"\n'
        "request_timeout_s = 30\n"
        "breaker_failure_threshold = 50\n"
        "breaker_reset_s = 1\n"
    )
    return (
        f'\n[providers.{OPENAI}]\nkind = "openai"\nbase_url = "{simulator_url}/v1"\n{common}'
        f'\n[providers.{ANTHROPIC}]\nkind = "anthropic"\nbase_url = "{simulator_url}"\n{common}'
    )


def outcome(state: str, attempt: int, error: Mapping[str, Any] | None, max_attempts: int) -> str:
    """What a faulted job's end reads as: succeeded, quota, failed_counted (every attempt
    spent) or what else it is (`<state>` or `failed_at_attempt_<n>`)."""
    if state == "succeeded":
        return "succeeded"
    if state == "failed" and error is not None and error.get("type") == "insufficient_quota":
        return "quota"
    if state == "failed" and attempt >= max_attempts:
        return "failed_counted"
    return f"failed_at_attempt_{attempt}" if state == "failed" else state


def fits(expected: str, got: str) -> bool:
    if expected == "succeeded":  # a retryable fault may still spend every attempt
        return got in ("succeeded", "failed_counted")
    return got == expected


def most_in_a_minute(times: Iterable[float]) -> int:
    """The most of `times` within any 60 s."""
    ordered = sorted(times)
    return max(
        (bisect.bisect_right(ordered, t + 60.0) - i for i, t in enumerate(ordered)), default=0
    )


def calls_by_job(
    request_log: Iterable[Mapping[str, Any]], job_ids: set[str]
) -> dict[str, list[float]]:
    """The simulator's requests by the job whose Idempotency-Key (`<job id>[:<generation>]`)
    they carry."""
    calls: dict[str, list[float]] = defaultdict(list)
    for request in request_log:
        key = request.get("idempotency_key") or ""
        job_id = key.split(":", 1)[0]
        if job_id in job_ids:
            calls[job_id].append(float(request["at"]))
    return calls


def check(
    rows: Iterable[Mapping[str, Any]],
    planned: Mapping[str, Planned],
    request_log: Iterable[Mapping[str, Any]],
) -> dict[str, Any]:
    """The invariants over the faulted jobs' rows (`JOBS`) and the simulator's request log."""
    rows = list(rows)
    wrong: list[str] = []
    outcomes: Counter[str] = Counter()
    for row in rows:
        error = row["error"]
        if isinstance(error, str):
            error = json.loads(error)
        got = outcome(row["state"], row["attempt"], error, row["max_attempts"])
        want = planned[row["id"]]
        outcomes[f"{want.fault} {got}"] += 1
        if not fits(want.expected, got):
            code = (error or {}).get("code")
            wrong.append(
                f"{row['id']} ({want.fault} at {want.provider} {want.endpoint}, fail_times "
                f"{want.fail_times}): "
                f"expected {want.expected}, ended {got} (error.code {code})"
            )
    calls = calls_by_job(request_log, set(planned))
    per_minute = {job_id: most_in_a_minute(times) for job_id, times in calls.items()}
    over = sorted(
        (job_id for job_id, n in per_minute.items() if n > CALLS_PER_MINUTE),
        key=lambda job_id: -per_minute[job_id],
    )
    return {
        "stream_fault_jobs": len(planned),
        "stream_fault_outcomes": dict(sorted(outcomes.items())),
        "stream_fault_outcomes_wrong": len(wrong) + len(set(planned) - {r["id"] for r in rows}),
        "stream_fault_wrong_sample": wrong[:5],
        "stream_fault_calls_max_per_job_minute": max(per_minute.values(), default=0),
        "stream_fault_calls_max_per_job": max((len(t) for t in calls.values()), default=0),
        "stream_fault_calls": sum(len(t) for t in calls.values()),
        "stream_fault_jobs_over_call_bound": len(over),
        "stream_fault_over_call_bound_sample": [
            f"{job_id}: {per_minute[job_id]} calls in a minute" for job_id in over[:5]
        ],
    }
