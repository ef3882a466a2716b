"""Per-tenant limits as pure rules: model allow-lists, output-token caps, the Retry-After of a
full queue, the daily budgets of each concurrency key."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from jobgate import errors

# The request field that bounds output, per endpoint (OpenAI chat's legacy name second).
OUTPUT_TOKEN_FIELDS: dict[str, tuple[str, ...]] = {
    "/v1/chat/completions": ("max_completion_tokens", "max_tokens"),
    "/v1/responses": ("max_output_tokens",),
    "/v1/messages": ("max_tokens",),
}
MAX_RETRY_AFTER_S = 120
# Every name a request body may cap its output by, whatever its endpoint (a token estimate
# reads each of them).
OUTPUT_CAPS = ("max_tokens", "max_completion_tokens", "max_output_tokens")


def check_allowed(
    *,
    model: str | None,
    provider: str,
    allowed_models: tuple[str, ...],
    allowed_providers: tuple[str, ...],
) -> None:
    if allowed_providers and provider not in allowed_providers:
        raise errors.LimitExceeded(
            "allowed_providers", f"this tenant may not use provider {provider!r}"
        )
    if allowed_models and model not in allowed_models:
        raise errors.LimitExceeded("allowed_models", f"this tenant may not use model {model!r}")


def check_output_bound(
    body: dict[str, Any], *, bound: int, provider: str, model: str | None
) -> None:
    """Refuse (errors.InvalidRequest, a 400) a body whose output cap is below 1 or past
    `bound`, what `provider` (for `model`) allows: the provider would refuse it anyway, and
    until then its estimate would be charged to the provider's shared token limit."""
    for field in OUTPUT_CAPS:
        cap = body.get(field)
        if cap is None or isinstance(cap, bool) or not isinstance(cap, int | float):
            continue  # absent, or not a number: the provider's validation says
        if not 1 <= cap <= bound:
            of = f"model {model!r} on provider {provider!r}" if model else f"provider {provider!r}"
            raise errors.InvalidRequest(
                f"body.{field} must be between 1 and {bound}, the output bound of {of} "
                f"(max_output_tokens)",
                param=f"body.{field}",
                code="number_out_of_range",
            )


def cap_output_tokens(
    endpoint: str, body: dict[str, Any], *, cap: int, mode: str
) -> dict[str, Any]:
    """The body with its output-token bound at most `cap` (mode `clamp`: rewritten, a missing
    bound is set), or errors.LimitExceeded when it asks for more (mode `reject`)."""
    fields = OUTPUT_TOKEN_FIELDS.get(endpoint)
    if cap <= 0 or fields is None:
        return body
    present = [f for f in fields if isinstance(body.get(f), int) and not isinstance(body[f], bool)]
    asked = max((body[f] for f in present), default=None)
    if asked is not None and asked <= cap:
        return body
    if mode == "reject" and asked is not None:
        raise errors.LimitExceeded(
            "max_output_tokens",
            f"{present[0]} {asked} exceeds this tenant's max_output_tokens ({cap})",
        )
    capped = dict(body)
    for field in present or fields[:1]:
        capped[field] = cap
    return capped


def retry_after_s(*, excess: int, drain_per_s: float | None) -> int:
    """How long a refused client should wait: the time the queue needs to drain `excess`
    jobs at the observed rate, within 1..120 s (120 when nothing drains)."""
    if drain_per_s is None:
        return 30
    if drain_per_s <= 0:
        return MAX_RETRY_AFTER_S
    return max(1, min(MAX_RETRY_AFTER_S, math.ceil(max(excess, 1) / drain_per_s)))


@dataclasses.dataclass(frozen=True, slots=True)
class KeyBudget:
    """A tenant's daily budgets per concurrency key (0: none)."""

    tokens: int
    usd: Decimal


def keys_over_budget(
    budgets: Mapping[str, KeyBudget],
    tokens: Mapping[tuple[str, str], int],
    spend: Mapping[tuple[str, str], Decimal],
) -> dict[tuple[str, str], str]:
    """THE per-key budget rule: each (tenant, concurrency key) whose tokens or spend since UTC
    midnight reached a budget per key of its tenant, with the name of the limit it reached
    (the token budget first). A key exactly at its budget is over it, as a tenant is."""
    blocked: dict[tuple[str, str], str] = {}
    for key in sorted(tokens.keys() | spend.keys()):
        budget = budgets.get(key[0])
        if budget is None:
            continue
        if 0 < budget.tokens <= tokens.get(key, 0):
            blocked[key] = "daily_token_budget_per_key"
        elif 0 < budget.usd <= spend.get(key, Decimal(0)):
            blocked[key] = "daily_cost_budget_usd_per_key"
    return blocked
