"""What a run produces: one Case per configuration measured, plus where and how it ran."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from typing import Any


@dataclasses.dataclass
class Case:
    """One measured configuration of one system, e.g. PgQueuer's drain at batch size 100."""

    section: str  # drain | enqueue | http | longpoll | inflight | webhooks
    system: str  # jobgate | pgqueuer | procrastinate
    backend: str  # postgres | sqlite
    name: str  # what was measured within the section, e.g. "single" or "submit"
    config: dict[str, Any]
    metrics: dict[str, float | None]
    note: str = ""
    error: str | None = None  # set when the configuration could not be measured

    @property
    def label(self) -> str:
        settings = ", ".join(f"{k}={v}" for k, v in self.config.items())
        return f"{self.system} {self.backend} {self.name} ({settings})"


def best(cases: Iterable[Case], metric: str, *, lowest: bool = False) -> Case | None:
    """The case with the highest (or lowest) value of `metric`, among those that have it."""
    scored = [c for c in cases if c.error is None and c.metrics.get(metric) is not None]
    if not scored:
        return None
    return (min if lowest else max)(scored, key=lambda c: float(c.metrics[metric] or 0.0))


def select(cases: Iterable[Case], **where: str) -> list[Case]:
    return [c for c in cases if all(getattr(c, k) == v for k, v in where.items())]


def percentile(values: Sequence[float], fraction: float) -> float | None:
    """The nearest-rank percentile (fraction in [0, 1]); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def latency_summary(latencies_s: Sequence[float], prefix: str = "") -> dict[str, float | None]:
    """p50 / p99 / max in milliseconds."""

    def ms(value: float | None) -> float | None:
        return None if value is None else round(value * 1000, 3)

    return {
        f"{prefix}p50_ms": ms(percentile(latencies_s, 0.50)),
        f"{prefix}p99_ms": ms(percentile(latencies_s, 0.99)),
        f"{prefix}max_ms": ms(max(latencies_s) if latencies_s else None),
    }
