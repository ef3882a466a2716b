"""Recurring schedules as storage keeps them (POST /v1/schedules)."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any


@dataclasses.dataclass(frozen=True, slots=True)
class Schedule:
    id: str
    tenant_id: str
    cron: str  # five fields, UTC
    template: dict[str, Any]  # a POST /v1/jobs body
    paused: bool
    next_run_at: datetime  # the next slot to fire (the oldest not yet fired)
    created_at: datetime
