"""Provider-native batches, the pure rules beside the planner: a batch's one model may be named
with a provider's prefix (the prefix picks who serves the line), and usage sent in provider
batches is priced at the provider's batch_discount."""

from __future__ import annotations

from decimal import Decimal

import orjson

from jobgate.domain import costs
from jobgate.wire import openai_batches as batches

CHAT = "/v1/chat/completions"


def _line(custom_id: str, model: str) -> bytes:
    body = {"model": model, "messages": [{"role": "user", "content": "x"}]}
    return orjson.dumps({"custom_id": custom_id, "method": "POST", "url": CHAT, "body": body})


def test_a_provider_prefix_names_the_same_model() -> None:
    check = batches.Validation(endpoint=CHAT, max_lines=10, providers=frozenset({"oa", "sim"}))
    for n, model in enumerate(["oa/gpt-x", "gpt-x", "sim/gpt-x"]):
        check.check(_line(f"c{n}", model), n + 1)
    assert check.finish() == [] and check.model == "gpt-x"


def test_a_prefix_that_is_no_provider_is_part_of_the_model() -> None:
    check = batches.Validation(endpoint=CHAT, max_lines=10, providers=frozenset({"oa"}))
    check.check(_line("a", "meta-llama/Llama-3"), 1)
    check.check(_line("b", "Llama-3"), 2)
    check.check(_line("c", "oa/gpt-x"), 3)
    assert [e.code for e in check.finish()] == ["model_mismatch", "model_mismatch"]
    assert check.model == "meta-llama/Llama-3"
    plain = batches.Validation(endpoint=CHAT, max_lines=10)  # no providers: as OpenAI checks
    plain.check(_line("a", "oa/gpt-x"), 1)
    plain.check(_line("b", "gpt-x"), 2)
    assert [e.code for e in plain.finish()] == ["model_mismatch"]


PRICE = costs.Price(Decimal(2), Decimal(8), cache_read_per_mtok=Decimal(1))


def _usage(native: bool, provider: str = "oa") -> costs.UsageTotal:
    return costs.UsageTotal(
        "t", provider, "gpt-x", 3_000_000, 1_000_000, cache_read_tokens=1_000_000,
        native_batch=native,
    )  # fmt: skip


def test_native_batch_usage_costs_the_discounted_price() -> None:
    prices = {"oa": {"*": PRICE}, "other": {"*": PRICE}}
    full = costs.spend([_usage(False)], prices).by_tenant["t"]
    assert full == Decimal(2 * 2 + 1 + 8)
    half = costs.spend([_usage(True)], prices, {"oa": Decimal("0.5")}).by_tenant["t"]
    assert half == full / 2
    quarter = costs.spend([_usage(True)], prices, {"oa": Decimal("0.25")}).by_tenant["t"]
    assert quarter == full / 4
    # A provider without a configured discount: the batch APIs' half.
    assert costs.spend([_usage(True, "other")], prices).by_tenant["t"] == full / 2
    both = costs.spend([_usage(False), _usage(True)], prices, {"oa": Decimal("0.5")})
    assert both.by_tenant["t"] == full + full / 2


def test_unpriced_native_usage_is_named_like_any_other() -> None:
    spent = costs.spend([_usage(True)], {}, {"oa": Decimal("0.5")})
    assert spent.by_tenant["t"] == 0 and spent.unpriced == {("oa", "gpt-x")}
