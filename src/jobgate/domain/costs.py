"""What usage costs: prices per provider and model (with a `*` fallback), and a day's spend per
tenant from the usage ledger. Money is Decimal USD throughout, so sums never drift."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from decimal import Decimal

ANY_MODEL = "*"  # the price of any model of a provider that has no price of its own
# What a provider-native batch's tokens cost against the provider's prices, where its
# `batch_discount` is not known (OpenAI's and Anthropic's batch APIs bill half).
DEFAULT_BATCH_DISCOUNT = Decimal("0.5")
_PER_MTOK = Decimal(1_000_000)


@dataclasses.dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens. Prompt-cache reads and writes have their own prices (None:
    priced as input)."""

    input_per_mtok: Decimal
    output_per_mtok: Decimal
    cache_read_per_mtok: Decimal | None = None
    cache_write_per_mtok: Decimal | None = None


# provider name -> model name (or ANY_MODEL) -> price
Prices = Mapping[str, Mapping[str, Price]]


@dataclasses.dataclass(frozen=True, slots=True)
class UsageTotal:
    """Tokens one tenant used on one provider's model: completions minus refunds, so the
    totals may be zero (everything refunded)."""

    tenant_id: str
    provider: str
    model: str | None  # None: the provider reported no model
    input_tokens: int  # every input token, cache reads and writes included
    output_tokens: int
    cache_read_tokens: int = 0  # of input_tokens
    cache_write_tokens: int = 0  # of input_tokens
    concurrency_key: str | None = None  # the jobs' key, when usage is read per key
    native_batch: bool = False  # sent in the provider's own batches: priced at the batch price

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclasses.dataclass(frozen=True, slots=True)
class Spend:
    by_tenant: dict[str, Decimal]  # USD; tenants without usage are absent
    unpriced: frozenset[tuple[str, str | None]]  # (provider, model) counted at 0: no price
    # USD per (tenant, concurrency key), of the usage read per key (else empty)
    by_key: dict[tuple[str, str], Decimal] = dataclasses.field(default_factory=dict)


def price_for(prices: Prices, *, provider: str, model: str | None) -> Price | None:
    """The model's own price, else the provider's `*` price, else None (unpriced)."""
    table = prices.get(provider)
    if table is None:
        return None
    if model is not None and model in table:
        return table[model]
    return table.get(ANY_MODEL)


def discounted(price: Price, discount: Decimal) -> Price:
    """The price of the same tokens sent in a provider-native batch: every rate times
    `discount` (a provider's `batch_discount`, 0.5 for OpenAI's and Anthropic's batch APIs)."""

    def scaled(rate: Decimal | None) -> Decimal | None:
        return None if rate is None else rate * discount

    return Price(
        price.input_per_mtok * discount,
        price.output_per_mtok * discount,
        scaled(price.cache_read_per_mtok),
        scaled(price.cache_write_per_mtok),
    )


def cost_usd(
    price: Price,
    *,
    input_tokens: int,
    output_tokens: int,
    cache_read_tokens: int = 0,
    cache_write_tokens: int = 0,
) -> Decimal:
    """Exact cost of some tokens (negative for refunded tokens). `input_tokens` counts every
    input token; the cache reads and writes among them are priced at their own prices."""
    read_price = (
        price.input_per_mtok if price.cache_read_per_mtok is None else price.cache_read_per_mtok
    )
    write_price = (
        price.input_per_mtok if price.cache_write_per_mtok is None else price.cache_write_per_mtok
    )
    plain_input = input_tokens - cache_read_tokens - cache_write_tokens
    micro = (
        plain_input * price.input_per_mtok
        + cache_read_tokens * read_price
        + cache_write_tokens * write_price
        + output_tokens * price.output_per_mtok
    )
    return micro / _PER_MTOK


def spend(
    usage: Iterable[UsageTotal],
    prices: Prices,
    batch_discounts: Mapping[str, Decimal] | None = None,
) -> Spend:
    """Each tenant's spend over the usage given (and each concurrency key's, for usage read
    per key). Usage sent in provider-native batches costs its price times the provider's
    `batch_discounts` entry (DEFAULT_BATCH_DISCOUNT when it has none). Usage without a price
    counts 0 and is named in `unpriced`, so that the caller can make it visible."""
    by_tenant: dict[str, Decimal] = {}
    by_key: dict[tuple[str, str], Decimal] = {}
    unpriced: set[tuple[str, str | None]] = set()
    for row in usage:
        price = price_for(prices, provider=row.provider, model=row.model)
        if price is not None and row.native_batch:
            factor = (batch_discounts or {}).get(row.provider, DEFAULT_BATCH_DISCOUNT)
            price = discounted(price, factor)
        if price is None:
            if row.input_tokens or row.output_tokens:
                unpriced.add((row.provider, row.model))
            amount = Decimal(0)
        else:
            amount = cost_usd(
                price,
                input_tokens=row.input_tokens,
                output_tokens=row.output_tokens,
                cache_read_tokens=row.cache_read_tokens,
                cache_write_tokens=row.cache_write_tokens,
            )
        by_tenant[row.tenant_id] = by_tenant.get(row.tenant_id, Decimal(0)) + amount
        if row.concurrency_key is not None:
            key = (row.tenant_id, row.concurrency_key)
            by_key[key] = by_key.get(key, Decimal(0)) + amount
    return Spend(by_tenant, frozenset(unpriced), by_key)


def usd(amount: float) -> Decimal:
    """A configured USD amount as the decimal the operator wrote (0.1 is 0.1, not
    0.1000000000000000055…): floats keep their shortest repr."""
    return Decimal(repr(float(amount)))
