"""The soak's stream-fault invariants (bench/soak_stream_faults.py): how a faulted job's end
reads, which ends its fault allows, and the upstream calls a job drew in any minute."""

from __future__ import annotations

import random
from typing import Any

from bench import soak_checks
from bench import soak_stream_faults as faults
from bench.soak_stream_faults import Planned


def test_each_fault_expects_its_class() -> None:
    assert Planned("stream_quota", faults.OPENAI, None).expected == "quota"
    assert Planned("stream_rate_limit", faults.OPENAI, 2).expected == "succeeded"
    assert Planned("stream_stall", faults.ANTHROPIC, None).expected == "failed_counted"


def test_an_end_reads_as_its_outcome() -> None:
    quota = {"type": "insufficient_quota", "code": "enforced_spend_limit_reached"}
    assert faults.outcome("succeeded", 3, None, 10) == "succeeded"
    assert faults.outcome("failed", 1, quota, 10) == "quota"
    assert faults.outcome("failed", 10, {"type": "server_error"}, 10) == "failed_counted"
    assert faults.outcome("failed", 1, {"type": "server_error"}, 10) == "failed_at_attempt_1"
    assert faults.outcome("running", 1, None, 10) == "running"


def test_a_retryable_fault_may_succeed_or_fail_counted_and_nothing_else() -> None:
    assert faults.fits("succeeded", "succeeded") and faults.fits("succeeded", "failed_counted")
    assert not faults.fits("succeeded", "failed_at_attempt_1")
    assert not faults.fits("succeeded", "quota")
    assert faults.fits("quota", "quota") and not faults.fits("quota", "failed_counted")
    assert not faults.fits("failed_counted", "succeeded")


def test_calls_are_counted_by_the_job_their_key_names_in_any_minute() -> None:
    log: list[dict[str, Any]] = [
        {"idempotency_key": "job_a", "at": 0.0},
        {"idempotency_key": "job_a:1", "at": 30.0},
        {"idempotency_key": "job_a", "at": 59.5},
        {"idempotency_key": "job_a", "at": 90.0},
        {"idempotency_key": "job_b", "at": 1.0},
        {"idempotency_key": None, "at": 2.0},
    ]
    calls = faults.calls_by_job(log, {"job_a"})
    assert calls == {"job_a": [0.0, 30.0, 59.5, 90.0]}
    assert faults.most_in_a_minute(calls["job_a"]) == 3
    assert faults.most_in_a_minute([]) == 0


def test_a_planned_job_carries_its_fault_to_the_simulator() -> None:
    rng = random.Random(7)
    seen = {faults.plan(rng).fault for _ in range(200)}
    assert seen == set(faults.FAULTS)
    stall = faults.job(Planned("stream_stall", faults.ANTHROPIC, 1, faults.MESSAGES), "hi", 4)
    assert stall["endpoint"] == "/v1/messages" and stall["stream"] is True
    assert stall["stall_timeout_s"] == faults.STALL_TIMEOUT_S
    assert stall["body"]["sim"] == {
        "fail_with": "stream_stall", "chunks": 4, "latency_s": 0.1, "fail_times": 1,
    }  # fmt: skip
    quota = faults.job(Planned("stream_quota", faults.OPENAI, None), "hi", 2)
    assert quota["provider"] == faults.OPENAI and "fail_times" not in quota["body"]["sim"]
    assert "max_attempts" not in quota  # fails at once
    always = faults.job(Planned("stream_overloaded", faults.OPENAI, None), "hi", 2)
    assert always["max_attempts"] == faults.ALWAYS_MAX_ATTEMPTS


def test_the_check_counts_wrong_ends_missing_jobs_and_calls_over_the_bound() -> None:
    planned = {
        "job_ok": Planned("stream_server_error", faults.OPENAI, 1),
        "job_early": Planned("stream_overloaded", faults.ANTHROPIC, 2),
        "job_quota": Planned("stream_quota", faults.OPENAI, None),
        "job_gone": Planned("stream_stall", faults.OPENAI, 1),
    }
    rows = [
        {"id": "job_ok", "state": "succeeded", "attempt": 2, "max_attempts": 10, "error": None},
        {"id": "job_early", "state": "failed", "attempt": 1, "max_attempts": 10,
         "error": '{"type": "server_error"}'},
        {"id": "job_quota", "state": "failed", "attempt": 1, "max_attempts": 10,
         "error": {"type": "insufficient_quota", "code": "insufficient_quota"}},
    ]  # fmt: skip
    log = [{"idempotency_key": "job_ok", "at": i * 0.5} for i in range(61)]
    result = faults.check(rows, planned, log)
    assert result["stream_fault_outcomes_wrong"] == 2  # job_early, and job_gone not found
    assert "job_early" in result["stream_fault_wrong_sample"][0]
    assert result["stream_fault_jobs_over_call_bound"] == 1
    assert result["stream_fault_calls_max_per_job_minute"] == 61
    assert result["stream_fault_outcomes"]["stream_quota quota"] == 1


def test_faults_meet_every_streaming_api_each_in_its_own_body() -> None:
    rng = random.Random(3)
    assert {faults.plan(rng).endpoint for _ in range(100)} == {
        "/v1/chat/completions", "/v1/responses", "/v1/messages",
    }  # fmt: skip
    responses = faults.job(Planned("stream_overloaded", faults.OPENAI, 1, "/v1/responses"), "hi", 3)
    assert responses["endpoint"] == "/v1/responses" and responses["provider"] == faults.OPENAI
    assert responses["body"]["input"] == "hi" and "messages" not in responses["body"]


def test_the_stream_check_reads_the_text_of_each_apis_result() -> None:
    chat = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "a b"}}]}
    message = {
        "type": "message",
        "content": [{"type": "text", "text": "a"}, {"type": "text", "text": " b"}],
    }
    response = {
        "object": "response",
        "output": [
            {"type": "reasoning", "summary": []},
            {"type": "message", "content": [{"type": "output_text", "text": "a b"}]},
        ],
    }
    assert {soak_checks._content(r) for r in (chat, message, response)} == {"a b"}
