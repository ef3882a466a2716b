"""When a finished job may be deleted (JOBGATE_RETENTION_S). Pure: the caller passes the
database's clock.

A terminal job is deleted with its events, outbox rows and delivery attempts once it
finished more than `retention_s` ago, unless:
- its idempotency key could still be live (created less than `idempotency_ttl_s` ago): a
  replay must find the job it names;
- it has usage billed today (UTC): today's budgets read the usage ledger, so those rows stay
  until the day turns (earlier days are summed into usage_daily as they are deleted);
- a webhook delivery of it is still pending (checked by the storage in the same statement).
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, time, timedelta


@dataclasses.dataclass(frozen=True, slots=True)
class Horizon:
    completed_before: datetime
    created_before: datetime
    usage_before: datetime  # the start of today, UTC


def horizon(now: datetime, *, retention_s: float, idempotency_ttl_s: float) -> Horizon:
    midnight = datetime.combine(now.astimezone(UTC).date(), time(0), tzinfo=UTC)
    return Horizon(
        completed_before=now - timedelta(seconds=retention_s),
        created_before=now - timedelta(seconds=idempotency_ttl_s),
        usage_before=midnight,
    )
