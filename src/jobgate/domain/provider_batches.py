"""Provider-native batches, the pure part: how a batch's lines for providers with native batches
are split into provider batches (by provider, then at each provider's limits on requests and
bytes, lines kept in order), the key that names each part before it exists at the provider,
and the request counts of a batch summed over its parts.

A part's key is derived from the batch, the provider and the part's place, so planning the same
lines again (after a crash) names the same parts: the key travels in the provider batch's
metadata, and an unknown create outcome is resolved by finding that key at the provider,
never by creating a second batch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from jobgate.wire.openai_batches import RequestCounts

PART_KEY = "jobgate_part"  # the provider batch's metadata member that holds the part's key


@dataclasses.dataclass(frozen=True, slots=True)
class Limits:
    """One provider batch's bounds: requests, and bytes of the request body or input file
    (each line's own bytes plus `per_line_bytes` of separator, plus `envelope_bytes`)."""

    max_requests: int
    max_bytes: int
    per_line_bytes: int
    envelope_bytes: int


# OpenAI's Batch API: an input file of at most 50,000 requests and 200 MB, one JSON line each.
# Anthropic's Message Batches: at most 100,000 requests or 256 MB, whichever comes first, sent
# as one JSON body `{"requests": [...]}`.
LIMITS: Mapping[str, Limits] = {
    "openai": Limits(50_000, 200 * 1024 * 1024, per_line_bytes=1, envelope_bytes=0),
    "anthropic": Limits(100_000, 256 * 1024 * 1024, per_line_bytes=1, envelope_bytes=15),
}


@dataclasses.dataclass(frozen=True, slots=True)
class Line:
    """A line of the caller's batch bound for a provider with native batches: its number in
    the input file, the provider, and its size in that provider's encoding."""

    line: int
    provider: str
    size_bytes: int


@dataclasses.dataclass(frozen=True, slots=True)
class Part:
    """One provider batch to be: `index` counts the provider's parts from 0."""

    batch_id: str
    provider: str
    index: int
    lines: tuple[int, ...]
    size_bytes: int

    @property
    def key(self) -> str:
        return part_key(self.batch_id, self.provider, self.index)


@dataclasses.dataclass(frozen=True, slots=True)
class Plan:
    parts: tuple[Part, ...]
    oversized: tuple[int, ...]  # lines larger than their provider takes in one batch


def part_key(batch_id: str, provider: str, index: int) -> str:
    """The key a part carries in its provider batch's metadata (stable across replans)."""
    return f"{batch_id}.{provider}.{index}"


def plan(
    batch_id: str,
    lines: Iterable[Line],
    kinds: Mapping[str, str],
    *,
    limits: Mapping[str, Limits] = LIMITS,
) -> Plan:
    """Split `lines` (in input order) into parts: one provider each, within the `limits` of
    the provider's kind (`kinds`: provider name to kind; raises KeyError for a provider without
    one, ValueError for a kind without native batches). A line that alone exceeds the byte
    limit goes in no part: it is `oversized`."""
    by_kind = limits
    grouped: dict[str, list[Line]] = {}
    for item in lines:
        grouped.setdefault(item.provider, []).append(item)
    parts: list[Part] = []
    oversized: list[int] = []
    for provider, items in grouped.items():
        bound = by_kind.get(kinds[provider])
        if bound is None:
            raise ValueError(f"provider {provider!r} has no native batches")
        chosen: list[int] = []
        size = bound.envelope_bytes
        for item in sorted(items, key=lambda i: i.line):
            cost = item.size_bytes + bound.per_line_bytes
            if bound.envelope_bytes + cost > bound.max_bytes:
                oversized.append(item.line)
                continue
            if chosen and (len(chosen) >= bound.max_requests or size + cost > bound.max_bytes):
                parts.append(_part(batch_id, provider, parts, chosen, size))
                chosen, size = [], bound.envelope_bytes
            chosen.append(item.line)
            size += cost
        if chosen:
            parts.append(_part(batch_id, provider, parts, chosen, size))
    return Plan(tuple(parts), tuple(sorted(oversized)))


def _part(batch_id: str, provider: str, made: list[Part], lines: list[int], size: int) -> Part:
    index = sum(1 for part in made if part.provider == provider)
    return Part(batch_id, provider, index, tuple(lines), size)


def summed(counts: Iterable[RequestCounts]) -> RequestCounts:
    """A batch's counts: its parts' (and its job-run lines') added up."""
    total = RequestCounts()
    for item in counts:
        total += item
    return total
