"""Deleting finished jobs past the retention period, and the usage rollup that keeps their
usage (a part of the Storage contract)."""

from __future__ import annotations

import dataclasses
from datetime import date
from typing import Protocol

from jobgate.domain.retention import Horizon


@dataclasses.dataclass(frozen=True, slots=True)
class RetentionBatch:
    """Rows one retention transaction deleted, by table."""

    jobs: int = 0
    job_events: int = 0
    outbox: int = 0
    webhook_attempts: int = 0
    usage_ledger: int = 0

    def by_table(self) -> dict[str, int]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True, slots=True)
class UsageDay:
    tenant_id: str
    day: date  # UTC
    provider: str
    model: str  # '' when the ledger had no model
    jobs: int  # completions
    input_tokens: int  # completions minus refunds
    output_tokens: int
    cache_read_tokens: int = 0  # of input_tokens
    cache_write_tokens: int = 0  # of input_tokens


class RetentionStore(Protocol):
    async def retention_delete(self, *, horizon: Horizon, limit: int) -> RetentionBatch:
        """One short transaction: delete up to `limit` terminal jobs the horizon allows
        (domain.retention), oldest completion first, with their events, outbox rows, delivery
        attempts and usage ledger rows, after adding their usage to usage_daily. A job with
        a pending delivery is kept. Safe from several processes at once (SKIP LOCKED on
        PostgreSQL, one writer on SQLite): each job is deleted and summed once."""
        ...

    async def usage_daily(self, *, tenant_id: str | None = None) -> list[UsageDay]:
        """The rollup of deleted jobs' usage, by tenant, day, provider and model."""
        ...
