"""Cost arithmetic: price lookup with the `*` fallback, exact sums, refunds, unpriced usage."""

from __future__ import annotations

from decimal import Decimal

from jobgate.domain import costs
from jobgate.domain.costs import Price, UsageTotal

MINI = Price(Decimal("0.40"), Decimal("1.60"))
ANY_OPENAI = Price(Decimal("2"), Decimal("8"))
PRICES: costs.Prices = {
    "openai": {"gpt-4.1-mini": MINI, "*": ANY_OPENAI},
    "claude": {"haiku": MINI},
}


def test_a_model_price_wins_over_the_providers_fallback() -> None:
    assert costs.price_for(PRICES, provider="openai", model="gpt-4.1-mini") == MINI
    assert costs.price_for(PRICES, provider="openai", model="gpt-4.1") == ANY_OPENAI
    assert costs.price_for(PRICES, provider="openai", model=None) == ANY_OPENAI


def test_no_price_without_a_model_price_or_fallback() -> None:
    assert costs.price_for(PRICES, provider="claude", model="opus") is None
    assert costs.price_for(PRICES, provider="claude", model=None) is None
    assert costs.price_for(PRICES, provider="sim", model="sim-echo") is None
    assert costs.price_for({}, provider="openai", model="gpt-4.1-mini") is None


def test_cost_is_per_million_tokens_and_exact() -> None:
    cost = costs.cost_usd(MINI, input_tokens=1_000_000, output_tokens=500_000)
    assert cost == Decimal("1.20")  # 0.40 + 0.80
    assert costs.cost_usd(MINI, input_tokens=1, output_tokens=0) == Decimal("0.0000004")
    assert costs.cost_usd(MINI, input_tokens=-250, output_tokens=-250) == Decimal("-0.0005")


def test_sums_do_not_drift() -> None:
    # $0.10 + $0.20 is $0.30 exactly (in floats it is 0.30000000000000004), and so are a
    # thousand rows of a tenth of a micro-dollar each.
    prices: costs.Prices = {"p": {"*": Price(Decimal(1), Decimal("0.1"))}}
    usage = [UsageTotal("t", "p", "a", 100_000, 0), UsageTotal("t", "p", "b", 200_000, 0)]
    usage += [UsageTotal("u", "p", f"m{i}", 0, 1) for i in range(1000)]
    spent = costs.spend(usage, prices)
    assert spent.by_tenant == {"t": Decimal("0.3"), "u": Decimal("0.0001")}


def test_spend_per_tenant_with_refunds_and_unpriced_usage() -> None:
    usage = [
        UsageTotal("a", "openai", "gpt-4.1-mini", 1_000_000, 1_000_000),  # 0.40 + 1.60
        UsageTotal("a", "openai", "gpt-4.1", 500_000, 0),  # fallback: 1.00
        UsageTotal("a", "claude", "opus", 9_999, 9_999),  # no price: 0, reported
        UsageTotal("b", "openai", "gpt-4.1-mini", -1_000_000, 0),  # more refunded than used
        UsageTotal("b", "claude", "haiku", 0, 0),  # all refunded
        UsageTotal("c", "sim", None, 0, 0),  # nothing left: nothing to report
    ]
    spent = costs.spend(usage, PRICES)
    assert spent.by_tenant == {"a": Decimal("3.00"), "b": Decimal("-0.40"), "c": Decimal(0)}
    assert spent.unpriced == frozenset({("claude", "opus")})


def test_configured_amounts_keep_the_decimal_the_operator_wrote() -> None:
    assert costs.usd(0.1) == Decimal("0.1")
    assert costs.usd(5) == Decimal("5.0")
    assert costs.usd(0.3) == costs.usd(0.1) + costs.usd(0.2)
