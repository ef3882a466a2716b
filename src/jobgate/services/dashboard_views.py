"""What the operator dashboard reads and does across tenants, so its routes stay an HTTP edge:
they check the operator and render; the queries and the rules live here."""

from __future__ import annotations

from jobgate import errors
from jobgate.domain.job import Job
from jobgate.domain.states import JobState
from jobgate.services.jobs import JobService
from jobgate.storage.admin_protocol import EndpointHealth
from jobgate.storage.protocol import Storage

DEAD_LETTERS_SHOWN = 200


class DashboardViews:
    def __init__(self, *, storage: Storage, jobs: JobService) -> None:
        self.storage = storage
        self.jobs = jobs

    async def dead_letters(self) -> tuple[list[Job], dict[str, str]]:
        """The newest dead-lettered failures of every tenant, and tenant names by id."""
        rows = await self.storage.admin_job_list(
            dead_lettered=True, states=[JobState.FAILED], limit=DEAD_LETTERS_SHOWN
        )
        names = {t.id: t.name for t in await self.storage.tenant_list()}
        return rows, names

    async def redrive(self, *, job_id: str, operator: str) -> Job:
        """Redrive a dead-lettered job of any tenant (errors.NotFound for no such job)."""
        job = await self.storage.job_get(job_id=job_id)
        if job is None:
            raise errors.NotFound("job", job_id)
        return await self.jobs.retry(
            tenant_id=job.tenant_id, job_id=job_id, actor=f"operator:{operator}"
        )

    async def endpoint_health(self) -> list[EndpointHealth]:
        """Every webhook endpoint's delivery health."""
        return await self.storage.admin_endpoint_health()
