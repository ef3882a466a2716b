"""Weighted fair claiming: which queued jobs a claim of `limit` slots takes, across tenants.

Each tenant has `running` jobs holding worker slots, a `weight` and at most `free` more slots
(its cap minus what it runs). Its k-th candidate (in priority, run_at, id order) scores
(running + k) / weight; the claim takes the lowest scores. A tenant far below its weighted share
of running work is served first, heavier tenants get proportionally more, priorities order jobs
within a tenant, and no tenant exceeds its cap. PostgreSQL computes the same order in SQL
(queries `job_claim`); tests check that the two agree.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime


@dataclasses.dataclass(frozen=True, slots=True)
class Candidate:
    id: str
    priority: int
    run_at: datetime


@dataclasses.dataclass(frozen=True, slots=True)
class TenantQueue:
    tenant_id: str
    running: int
    weight: float
    free: int  # slots it may still take (its cap minus running), or the claim limit if uncapped
    candidates: tuple[Candidate, ...]  # its claimable jobs, best first, at most `free`


def fair_order(queues: list[TenantQueue], limit: int) -> list[str]:
    """The ids of the jobs to claim, best first."""
    scored: list[tuple[float, int, datetime, str]] = []
    for queue in queues:
        for rank, candidate in enumerate(queue.candidates[: max(queue.free, 0)], start=1):
            share = (queue.running + rank) / queue.weight
            scored.append((share, candidate.priority, candidate.run_at, candidate.id))
    scored.sort()
    return [job_id for *_, job_id in scored[:limit]]
