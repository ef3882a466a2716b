"""Provider-native batches, the pure rules: splitting at each provider's limits, stable part
keys, summed request counts, and the batch price."""

from __future__ import annotations

from decimal import Decimal

import hypothesis
import pytest
from hypothesis import strategies as st

from jobgate.domain import costs, provider_batches
from jobgate.domain.provider_batches import Limits, Line
from jobgate.wire.openai_batches import RequestCounts

KINDS = {"oa": "openai", "claude": "anthropic"}


def test_lines_split_by_provider_in_line_order() -> None:
    lines = [Line(3, "claude", 10), Line(1, "oa", 10), Line(2, "claude", 10), Line(4, "oa", 5)]
    plan = provider_batches.plan("batch_1", lines, KINDS)
    assert [(p.provider, p.index, p.lines) for p in plan.parts] == [
        ("claude", 0, (2, 3)),
        ("oa", 0, (1, 4)),
    ]
    assert plan.parts[1].size_bytes == 10 + 1 + 5 + 1  # one newline per line
    assert plan.parts[0].size_bytes == 15 + 11 + 11  # `{"requests":[]}` and a comma each
    assert plan.oversized == ()


def test_openai_parts_hold_at_most_50000_lines() -> None:
    lines = [Line(n, "oa", 100) for n in range(1, 120_002)]
    plan = provider_batches.plan("b", lines, KINDS)
    assert [len(p.lines) for p in plan.parts] == [50_000, 50_000, 20_001]
    assert [p.key for p in plan.parts] == ["b.oa.0", "b.oa.1", "b.oa.2"]


def test_anthropic_parts_hold_at_most_256_mb() -> None:
    mb = 1024 * 1024
    lines = [Line(n, "claude", 100 * mb) for n in range(1, 6)]
    plan = provider_batches.plan("b", lines, KINDS)
    assert [p.lines for p in plan.parts] == [(1, 2), (3, 4), (5,)]
    assert all(p.size_bytes <= 256 * mb for p in plan.parts)


def test_a_line_larger_than_a_whole_batch_goes_in_no_part() -> None:
    too_big = 200 * 1024 * 1024  # plus its newline: one byte over OpenAI's input file limit
    plan = provider_batches.plan("b", [Line(1, "oa", 10), Line(2, "oa", too_big)], KINDS)
    assert [p.lines for p in plan.parts] == [(1,)] and plan.oversized == (2,)


def test_a_provider_without_native_batches_is_refused() -> None:
    with pytest.raises(ValueError, match="no native batches"):
        provider_batches.plan("b", [Line(1, "local", 1)], {"local": "sim"})


@hypothesis.given(
    sizes=st.lists(st.tuples(st.sampled_from(["oa", "claude"]), st.integers(0, 60)), max_size=60),
    max_requests=st.integers(1, 7),
    max_bytes=st.integers(1, 200),
)
def test_every_line_once_in_order_within_the_limits(
    sizes: list[tuple[str, int]], max_requests: int, max_bytes: int
) -> None:
    lines = [Line(n, provider, size) for n, (provider, size) in enumerate(sizes, start=1)]
    limits = Limits(max_requests, max_bytes, per_line_bytes=1, envelope_bytes=2)
    plan = provider_batches.plan("b", lines, KINDS, limits={"openai": limits, "anthropic": limits})
    placed = [line for part in plan.parts for line in part.lines]
    assert sorted(placed + list(plan.oversized)) == [line.line for line in lines]
    for part in plan.parts:
        assert part.lines == tuple(sorted(part.lines)) and 1 <= len(part.lines) <= max_requests
        assert part.size_bytes <= max_bytes
        assert {lines[n - 1].provider for n in part.lines} == {part.provider}
    again = provider_batches.plan("b", lines, KINDS, limits={"openai": limits, "anthropic": limits})
    assert again == plan  # replanning names the same parts


def test_request_counts_sum() -> None:
    total = provider_batches.summed([RequestCounts(3, 2, 1), RequestCounts(5, 1, 0)])
    assert total == RequestCounts(8, 3, 1)
    assert provider_batches.summed([]) == RequestCounts()


def test_batch_usage_is_priced_at_the_discount() -> None:
    price = costs.Price(Decimal("2"), Decimal("8"), cache_read_per_mtok=Decimal("0.5"))
    half = costs.discounted(price, Decimal("0.5"))
    assert half == costs.Price(Decimal("1.0"), Decimal("4.0"), Decimal("0.25"), None)
    tokens = {"input_tokens": 1_000_000, "output_tokens": 500_000}
    assert costs.cost_usd(half, **tokens) * 2 == costs.cost_usd(price, **tokens)
