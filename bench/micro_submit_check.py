"""`python -m bench.micro_submit_check [--number N]`: the one check of a submit body
(http.submit_body.spec_of, what POST /v1/jobs, each bulk item and a batch line pay) beside
SubmitJobRequest itself (its validation, and the spec the routes made of it), per kind of body:
the usual one, bodies with options, bodies refused. The two are timed in alternate order, round
after round in this process, and the best round of each counts, in ns per body: on a loaded
machine only their ratio means anything.
"""

from __future__ import annotations

import argparse
import timeit
from collections.abc import Callable
from typing import Any

import pydantic

from jobgate import errors
from jobgate.http import problems, submit_body
from jobgate.http.schemas.native import SubmitJobRequest
from jobgate.services.jobs import SubmitSpec

CHAT = "/v1/chat/completions"
BODY = {"model": "sim-echo", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 16}
BODIES: dict[str, dict[str, Any]] = {
    "usual": {"endpoint": CHAT, "body": BODY},
    "usual+metadata": {"endpoint": CHAT, "body": BODY, "metadata": {"batch": "b-17", "row": 3}},
    "options": {"endpoint": CHAT, "body": BODY, "priority": 2, "max_attempts": 5, "stream": True,
                "start_timeout_s": 600, "concurrency_key": "user-9"},
    "webhook": {"endpoint": CHAT, "body": BODY,
                "webhook": {"url": "https://h.example/x", "event_types": ["job.succeeded"]}},
    "sim": {"endpoint": CHAT, "body": {**BODY, "sim": {"latency_s": 0.2, "fail_times": 1}}},
    "refused: run_at+delay_s": {"endpoint": CHAT, "body": BODY, "run_at": 5, "delay_s": 5},
    "refused: unknown member": {"endpoint": CHAT, "body": BODY, "prio": 1},
    "refused: long endpoint": {"endpoint": "e" * 201, "body": BODY},
    "refused: body not object": {"endpoint": CHAT, "body": "x"},
}  # fmt: skip


def by_model(fields: dict[str, Any]) -> SubmitSpec:
    """The spec, or the refusal, as the routes made them of the model itself."""
    try:
        payload = SubmitJobRequest.model_validate(fields)
    except pydantic.ValidationError as exc:
        raise problems.invalid_request_of(exc) from None
    members = {name: getattr(payload, name) for name in SubmitJobRequest.model_fields}
    members["body"] = fields["body"]
    members["webhook"] = None if payload.webhook is None else payload.webhook.model_dump()
    return SubmitSpec(**members, json_checked=True)


def _answering(check: Callable[[dict[str, Any]], SubmitSpec], fields: dict[str, Any]) -> Any:
    def call() -> Any:
        try:
            return check(fields)
        except errors.InvalidRequest as exc:
            return exc

    return call


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.micro_submit_check")
    parser.add_argument("--number", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    print(f"{'body':26s} {'one check':>10s} {'model':>10s} {'ratio':>6s}")
    for name, fields in BODIES.items():
        calls = {
            "check": _answering(submit_body.spec_of, fields),
            "model": _answering(by_model, fields),
        }
        best = dict.fromkeys(calls, float("inf"))
        for round_ in range(args.rounds):
            for which in sorted(calls, reverse=round_ % 2 == 1):
                seconds = timeit.timeit(calls[which], number=args.number) / args.number
                best[which] = min(best[which], seconds)
        check, model = best["check"] * 1e9, best["model"] * 1e9
        print(f"{name:26s} {check:8.0f} ns {model:8.0f} ns {check / model:6.2f}")


if __name__ == "__main__":
    main()
