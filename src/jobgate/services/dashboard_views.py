"""What the operator dashboard and console read and do across tenants, so their routes stay an
HTTP edge: they check the operator, parse the form and render; the reads live here."""

from __future__ import annotations

import dataclasses
from datetime import datetime

from jobgate import errors
from jobgate.domain.bulk import BulkAction, JobFilter
from jobgate.domain.job import Job, JobEvent
from jobgate.domain.rollups import QueueDepth, Transition
from jobgate.domain.states import JobState
from jobgate.services import alert_gauges, bulk_actions, console_window
from jobgate.services.batches import BatchService
from jobgate.services.jobs import JobService, SubmitSpec
from jobgate.storage.protocol import ApiStorage
from jobgate.storage.records import (
    BatchRecord,
    DeliveryAttempt,
    EndpointHealth,
    Tenant,
    TenantOverview,
    UsageEntry,
)

DEAD_LETTERS_SHOWN = 200
TEST_MODEL = "sim-echo"  # the built-in simulator: answers offline, with no provider key


@dataclasses.dataclass(frozen=True, slots=True)
class Overview:
    """The console overview's inputs: the queue by tenant, the charts' last hour."""

    tenants: list[TenantOverview]
    storage_ok: bool
    dialect: str
    endpoints: list[EndpointHealth]
    now: datetime  # the database's clock, which stamps the events
    transitions: list[Transition]  # the charts' window, newest first
    capped: bool  # the window's read hit its bound: its oldest minutes are incomplete
    depth: list[QueueDepth]


@dataclasses.dataclass(frozen=True, slots=True)
class JobDetail:
    job: Job
    tenant_name: str | None
    events: list[JobEvent]
    usage: list[UsageEntry]


class DashboardViews:
    def __init__(self, *, storage: ApiStorage, jobs: JobService) -> None:
        self.storage = storage
        self.jobs = jobs

    # -- dashboard ---------------------------------------------------------------------------

    async def dead_letters(self) -> tuple[list[Job], dict[str, str]]:
        """The newest dead-lettered failures of every tenant, and tenant names by id."""
        rows = await self.storage.admin_job_list(
            dead_lettered=True, states=[JobState.FAILED], limit=DEAD_LETTERS_SHOWN
        )
        return rows, await self.tenant_names()

    async def redrive(self, *, job_id: str, operator: str) -> Job:
        """Redrive a dead-lettered job of any tenant (errors.NotFound for no such job)."""
        job = await self.storage.job_get(job_id=job_id)
        if job is None:
            raise errors.NotFound("job", job_id)
        return await self.jobs.retry(
            tenant_id=job.tenant_id, job_id=job_id, actor=f"operator:{operator}"
        )

    async def cancel(self, *, job_id: str, operator: str) -> Job:
        """Cancel a job of any tenant, as JobService.cancel does (errors.NotFound for none)."""
        job = await self.storage.job_get(job_id=job_id)
        if job is None:
            raise errors.NotFound("job", job_id)
        return await self.jobs.cancel(
            tenant_id=job.tenant_id, job_id=job_id, actor=f"operator:{operator}"
        )

    async def submit_test_job(self, *, tenant_name: str, prompt: str, operator: str) -> Job:
        """A job for the built-in simulator (`sim-echo`) on behalf of a tenant: the empty
        console's way to see a job go through (errors.NotFound for no such tenant)."""
        tenant = await self.storage.tenant_get(name=tenant_name)
        if tenant is None:
            raise errors.NotFound("tenant", tenant_name)
        body = {"model": TEST_MODEL, "messages": [{"role": "user", "content": prompt}]}
        spec = SubmitSpec(
            endpoint="/v1/chat/completions", body=body, metadata={"submitted_by": operator}
        )
        return (await self.jobs.submit(tenant_id=tenant.id, spec=spec)).job

    async def endpoint_health(self) -> list[EndpointHealth]:
        """Every webhook endpoint's delivery health."""
        return await self.storage.admin_endpoint_health(
            min_attempts=alert_gauges.FAILING_AFTER_ATTEMPTS
        )

    # -- console -----------------------------------------------------------------------------

    async def overview(self) -> Overview:
        tenants = await self.storage.admin_overview()
        try:
            await self.storage.ping()
            storage_ok = True
        except errors.StorageError:
            storage_ok = False
        endpoints = await self.endpoint_health()
        now = await self.storage.database_now()
        transitions, capped = await console_window.last_hour(self.storage, now=now)
        depth = await self.storage.console_queue_depth()
        return Overview(
            tenants, storage_ok, self.storage.dialect, endpoints, now, transitions, capped, depth
        )

    async def tenants(self) -> list[Tenant]:
        return await self.storage.tenant_list()

    async def tenant_names(self) -> dict[str, str]:
        """Every tenant's name by id."""
        return {t.id: t.name for t in await self.storage.tenant_list()}

    async def tenant_id(self, name: str) -> str:
        """The id of the tenant so named; "" (matches no job) when there is none."""
        tenant = await self.storage.tenant_get(name=name)
        return "" if tenant is None else tenant.id

    async def database_now(self) -> datetime:
        """The database's clock: on PostgreSQL it stamps created_at, whatever this host's says."""
        return await self.storage.database_now()

    async def find(self, identifier: str, *, limit: int) -> list[Job]:
        """The job with this id, else the jobs with this provider job id."""
        rows = await self.storage.console_job_search(where=JobFilter(), job_id=identifier)
        if rows:
            return rows
        return await self.storage.console_job_search(
            where=JobFilter(), provider_job_id=identifier, limit=limit
        )

    async def search(self, where: JobFilter, *, after: str | None, limit: int) -> list[Job]:
        return await self.storage.console_job_search(where=where, after=after, limit=limit)

    async def job(self, job_id: str) -> JobDetail:
        """A job of any tenant with its timeline and usage (errors.NotFound for none)."""
        job = await self.storage.job_get(job_id=job_id)
        if job is None:
            raise errors.NotFound("job", job_id)
        tenant = await self.storage.tenant_get(tenant_id=job.tenant_id)
        return JobDetail(
            job=job,
            tenant_name=None if tenant is None else tenant.name,
            events=await self.storage.job_events(job_id=job_id),
            usage=await self.storage.usage_for_job(job_id=job_id),
        )

    async def deliveries(self, job_id: str) -> list[DeliveryAttempt]:
        """The webhook deliveries of a job's events."""
        return await self.storage.delivery_attempts_for_job(job_id=job_id)

    async def batches(self, *, per_tenant: int) -> list[tuple[BatchRecord, str]]:
        """Each tenant's newest batches, with the tenant's name."""
        found: list[tuple[BatchRecord, str]] = []
        for tenant in await self.storage.tenant_list():
            batches = await self.storage.batch_list(
                tenant_id=tenant.id, after=None, limit=per_tenant
            )
            found += [(batch, tenant.name) for batch in batches]
        return found

    async def batch_request_counts(self, batch: BatchRecord) -> dict[str, int]:
        """A batch's request counts as they stand (total, completed, failed)."""
        service = BatchService(storage=self.storage, settings=self.jobs.settings, ids=self.jobs.ids)
        counts: dict[str, int] = (await service.view(batch))["request_counts"]
        return counts

    # -- bulk actions across tenants ---------------------------------------------------------

    async def bulk_count(self, *, operator: str, action: BulkAction, where: JobFilter) -> int:
        """How many jobs of any tenant the action would change now (the confirmation)."""
        return await bulk_actions.BulkActions(storage=self.storage).count(
            caller=_operator(operator), action=action, where=where
        )

    async def bulk_apply(
        self, *, operator: str, action: BulkAction, where: JobFilter, after: str | None
    ) -> bulk_actions.BulkActionOutcome:
        """Apply the action to the jobs of any tenant, one call's worth after the cursor."""
        return await bulk_actions.BulkActions(storage=self.storage).apply(
            caller=_operator(operator),
            action=action,
            where=where,
            note="console",
            after=after,
            max_jobs=bulk_actions.MAX_JOBS_PER_CALL,
        )


def _operator(name: str) -> bulk_actions.Caller:
    """An operator acts on every tenant's jobs, logged as `operator:<name>`."""
    return bulk_actions.Caller(actor=f"operator:{name}", tenant_id=None)
