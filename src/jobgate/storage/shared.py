"""What both SQL backends share: a reap pass's result, tenant limits as query parameters and the
ledger's cache-token columns (the verdicts themselves are `domain.verdicts`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from jobgate.domain.states import JobState
from jobgate.domain.verdicts import POISON_JOB, Finish, Poisoning
from jobgate.storage.records import Finished, LimitOverrides, ReapResult


def reap_result(
    finished: Sequence[Finished | None],
    verdicts: Sequence[Finish] = (),
    poisonings: Sequence[Poisoning] = (),
) -> ReapResult:
    """What a reap pass did; `poisonings` are the jobs it judged poison, for the reaper's log."""
    result = ReapResult(poisonings=list(poisonings))
    poisoned = {v.lease.job_id for v in verdicts if v.reason == POISON_JOB}
    for done in finished:
        if done is None:
            continue
        if done.job_id in poisoned:
            result.poisoned.append(done.job_id)
        if done.state is JobState.QUEUED:
            result.requeued.append(done.job_id)
        elif done.state is JobState.CANCELLED:
            result.cancelled.append(done.job_id)
        else:
            result.failed.append(done.job_id)
    return result


def overrides_params(overrides: LimitOverrides) -> dict[str, Any]:
    """LimitOverrides as query parameters (lists stay lists: each dialect encodes JSON)."""
    params = dataclasses.asdict(overrides)
    for name in ("allowed_models", "allowed_providers"):
        params[name] = None if params[name] is None else list(params[name])
    cost = overrides.daily_cost_budget_usd
    return params | {"daily_cost_budget_usd": None if cost is None else float(cost)}


def cache_tokens(usage: dict[str, Any]) -> dict[str, int]:
    """The prompt-cache tokens of a usage object, as the ledger's columns."""
    return {
        "cache_read_tokens": int(usage.get("cache_read_input_tokens") or 0),
        "cache_write_tokens": int(usage.get("cache_creation_input_tokens") or 0),
    }
