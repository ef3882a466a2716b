"""What both SQL backends share: a reap pass's result and the limits and usage row converters
(the verdicts themselves are `domain.verdicts`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jobgate.domain import costs
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
    return {
        "max_running": overrides.max_running,
        "max_queued": overrides.max_queued,
        "weight": overrides.weight,
        "allowed_models": None
        if overrides.allowed_models is None
        else list(overrides.allowed_models),
        "allowed_providers": None
        if overrides.allowed_providers is None
        else list(overrides.allowed_providers),
        "max_output_tokens": overrides.max_output_tokens,
        "daily_token_budget": overrides.daily_token_budget,
        "daily_cost_budget_usd": None
        if overrides.daily_cost_budget_usd is None
        else float(overrides.daily_cost_budget_usd),
        "max_running_per_key": overrides.max_running_per_key,
    }


def overrides_from_row(row: Any, decode_json: Any) -> LimitOverrides:
    models = decode_json(row["allowed_models"])
    providers = decode_json(row["allowed_providers"])
    return LimitOverrides(
        max_running=row["max_running"],
        max_queued=row["max_queued"],
        weight=row["weight"],
        allowed_models=None if models is None else tuple(models),
        allowed_providers=None if providers is None else tuple(providers),
        max_output_tokens=row["max_output_tokens"],
        daily_token_budget=row["daily_token_budget"],
        daily_cost_budget_usd=row["daily_cost_budget_usd"],
        max_running_per_key=row["max_running_per_key"],
    )


def usage_total_from_row(row: Any) -> costs.UsageTotal:
    return costs.UsageTotal(
        tenant_id=row["tenant_id"],
        provider=row["provider"],
        model=row["model"],
        input_tokens=int(row["input_tokens"] or 0),
        output_tokens=int(row["output_tokens"] or 0),
        cache_read_tokens=int(row["cache_read_tokens"] or 0),
        cache_write_tokens=int(row["cache_write_tokens"] or 0),
    )


def cache_tokens(usage: dict[str, Any]) -> dict[str, int]:
    """The prompt-cache tokens of a usage object, as the ledger's columns."""
    return {
        "cache_read_tokens": int(usage.get("cache_read_input_tokens") or 0),
        "cache_write_tokens": int(usage.get("cache_creation_input_tokens") or 0),
    }
