"""When a finished job may be deleted (JOBGATE_RETENTION_S). Pure: the caller passes the
database's clock.

A terminal job is deleted with its events, outbox rows and delivery attempts once it
finished more than `retention_s` ago, unless (checked by the storage in the same statement):
- an idempotency key naming it is still live (expires after `now`): a replay must find the
  job its key names (a submit's key lives `idempotency_ttl_s`, a batch line's its window);
- a webhook delivery of it is still pending.
Its usage goes with it into usage_daily (per tenant and UTC day, today's included), which the
daily budgets read beside the ledger: usage never holds a job back.
A provider-native batch part's usage row (kind `batch`, named by the part's key) goes into
usage_daily_batches the same way once billed before the horizon.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta


@dataclasses.dataclass(frozen=True, slots=True)
class Horizon:
    now: datetime  # a key that expires after it is live
    completed_before: datetime


def horizon(now: datetime, *, retention_s: float) -> Horizon:
    return Horizon(now=now, completed_before=now - timedelta(seconds=retention_s))
