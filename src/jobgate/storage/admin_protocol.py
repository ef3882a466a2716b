"""What operators see across tenants (the dashboard): a part of the Storage contract."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from jobgate.domain.job import Job
from jobgate.domain.states import JobState


@dataclasses.dataclass(frozen=True, slots=True)
class TenantOverview:
    tenant_id: str
    tenant_name: str
    queued: int
    running: int
    oldest_due_at: datetime | None  # run_at of the longest-waiting claimable job
    dead_lettered: int


@dataclasses.dataclass(frozen=True, slots=True)
class EndpointHealth:
    endpoint_id: str
    tenant_name: str
    url: str
    disabled: bool
    disabled_reason: str | None
    pending: int
    succeeded: int
    failed: int
    last_status_code: int | None
    last_error: str | None


class AdminStore(Protocol):
    async def operator_key_create(
        self,
        *,
        key_id: str,
        name: str,
        key_hash: str,
        key_prefix: str,
        now: datetime | None = None,
    ) -> None:
        """Store an operator key's hash (never the key)."""
        ...

    async def operator_key_name(self, *, key_hash: str) -> str | None:
        """The operator owning a live key with this hash."""
        ...

    async def operator_key_count(self) -> int: ...

    async def admin_overview(self, *, now: datetime | None = None) -> list[TenantOverview]:
        """Every tenant's queue depth, running jobs, longest wait and dead letters."""
        ...

    async def admin_job_list(
        self,
        *,
        tenant_id: str | None = None,
        states: Sequence[JobState] | None = None,
        dead_lettered: bool | None = None,
        after: str | None = None,
        limit: int = 50,
    ) -> list[Job]:
        """Jobs of one tenant or of all, newest first; `after` pages like job_list."""
        ...

    async def admin_endpoint_health(self) -> list[EndpointHealth]:
        """Every webhook endpoint with its deliveries by state and its last failure."""
        ...
