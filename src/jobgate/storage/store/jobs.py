"""Tenants, API keys and the jobs' single-statement methods, written once for both dialects.

The lease holder's writes (claim, finish, reap) and the idempotent submit stay in each
dialect's store: they are transactions of several statements that each dialect runs its own
way (SKIP LOCKED on PostgreSQL, the one writer on SQLite).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from jobgate import errors
from jobgate.domain import job_search, ranges, verdicts
from jobgate.domain.bulk import BulkAction, JobFilter
from jobgate.domain.job import Job, JobEvent, Lease
from jobgate.domain.job_search import JobSearch
from jobgate.domain.states import JobState
from jobgate.storage import base
from jobgate.storage.executor import SqlPart
from jobgate.storage.records import (
    ApiKey,
    HeartbeatResult,
    JobSearchPage,
    JobStatus,
    OutboxEntry,
    Tenant,
    UsageEntry,
    WaitRead,
)
from jobgate.storage.transaction_requests import RecordIgnoredWrite


class JobQueries(SqlPart):
    # -- tenants and keys --------------------------------------------------------------

    async def tenant_create(
        self, *, tenant_id: str, name: str, webhook_secret: str, now: datetime | None = None
    ) -> Tenant:
        row = await self._sql.write_one(
            "tenant_insert",
            id=tenant_id,
            name=name,
            webhook_secret=webhook_secret,
            now=self._sql.codec.now(now),
        )
        if row is None:
            raise errors.Conflict(f"tenant {name!r} already exists", code="tenant_exists")
        return self._decode.record(Tenant, row)

    async def tenant_get(
        self, *, tenant_id: str | None = None, name: str | None = None
    ) -> Tenant | None:
        if tenant_id is not None:
            row = await self._sql.read_one("tenant_by_id", id=tenant_id)
        else:
            row = await self._sql.read_one("tenant_by_name", name=name)
        return None if row is None else self._decode.record(Tenant, row)

    async def tenant_list(self) -> list[Tenant]:
        return [self._decode.record(Tenant, row) for row in await self._sql.read("tenant_list")]

    async def api_key_create(
        self,
        *,
        key_id: str,
        tenant_id: str,
        key_hash: str,
        key_prefix: str,
        now: datetime | None = None,
    ) -> ApiKey:
        row = await self._sql.write_one(
            "api_key_insert",
            id=key_id,
            tenant_id=tenant_id,
            key_hash=key_hash,
            key_prefix=key_prefix,
            now=self._sql.codec.now(now),
        )
        assert row is not None
        return self._decode.record(ApiKey, row)

    async def api_key_tenant(self, *, key_hash: str) -> Tenant | None:
        row = await self._sql.read_one("api_key_tenant", key_hash=key_hash)
        return None if row is None else self._decode.record(Tenant, row)

    async def api_key_list(self, *, tenant_id: str) -> list[ApiKey]:
        rows = await self._sql.read("api_key_list", tenant_id=tenant_id)
        return [self._decode.record(ApiKey, row) for row in rows]

    async def api_key_revoke(self, *, key_id: str, now: datetime | None = None) -> bool:
        revoked = await self._sql.write_count(
            "api_key_revoke", id=key_id, now=self._sql.codec.now(now)
        )
        return revoked > 0

    # -- jobs: reads -------------------------------------------------------------------

    async def job_get(self, *, job_id: str, tenant_id: str | None = None) -> Job | None:
        if tenant_id is None:
            row = await self._sql.read_one("job_get", id=job_id)
        else:
            row = await self._sql.read_one("job_get_for_tenant", id=job_id, tenant_id=tenant_id)
        return None if row is None else self._decode.job(row)

    async def job_view(self, *, job_id: str, tenant_id: str) -> Job | None:
        row = await self._sql.read_one("job_view_for_tenant", id=job_id, tenant_id=tenant_id)
        return None if row is None else self._decode.job(row)

    async def job_status(
        self, *, job_id: str, tenant_id: str, now: datetime | None = None
    ) -> JobStatus | None:
        row = await self._sql.read_one(
            "job_status_for_tenant",
            id=job_id,
            tenant_id=tenant_id,
            now=self._sql.codec.now(now),
            counted=ranges.QUEUE_POSITION_COUNTED,
        )
        if row is None:
            return None
        job = self._decode.job(row)
        place = row["queue_place"]  # walked where the stored state is 'queued'
        if job.state is not JobState.QUEUED or place is None:
            return JobStatus(job, None)
        codec = self._sql.codec
        read_at = codec.time_out(row["read_at"])
        assert read_at is not None
        position, exact = abs(int(place)), int(place) > 0  # negative: a floor
        pause = codec.json_out(row["pause"])
        wait = WaitRead(job.id, read_at, pause, position, None, None, exact)
        return JobStatus(job, position, wait, exact)

    async def job_without_input(self, *, job_id: str, tenant_id: str) -> Job | None:
        row = await self._sql.read_one(
            "job_without_input_for_tenant", id=job_id, tenant_id=tenant_id
        )
        return None if row is None else self._decode.job(row)

    async def job_list(
        self,
        *,
        tenant_id: str,
        states: Sequence[JobState] | None = None,
        dead_lettered: bool | None = None,
        after: str | None = None,
        limit: int = 20,
    ) -> list[Job]:
        await self._check_cursor(tenant_id, after)
        rows = await self._sql.read(
            "job_list",
            tenant_id=tenant_id,
            states=None if states is None else self._sql.codec.json([str(s) for s in states]),
            dead_lettered=self._sql.codec.flag(dead_lettered),
            after_id=after,
            limit=limit,
        )
        return [self._decode.job(row) for row in rows]

    async def job_search(
        self,
        *,
        tenant_id: str,
        search: JobSearch,
        states: Sequence[JobState] | None = None,
        dead_lettered: bool | None = None,
        after: str | None = None,
        limit: int = 20,
        walk_limit: int = job_search.WALK_ROWS,
    ) -> JobSearchPage:
        await self._check_cursor(tenant_id, after)
        codec = self._sql.codec
        where = JobFilter(
            tenant_id=tenant_id,
            states=None if states is None else tuple(states),
            provider=search.provider,
            model=search.model,
            created_after=search.created_after,
            created_before=search.created_before,
            metadata=search.metadata or None,
            dead_lettered=dead_lettered,
        )
        params = base.bulk_filter_params(where, BulkAction.CANCEL, time=codec.time, json=codec.json)
        rows = await self._sql.read(
            _search_query(where), **params, after_id=after, limit=limit, walk_limit=walk_limit
        )
        jobs = [self._decode.job(row) for row in rows if row["matched"]]
        ends = [row["id"] for row in rows if row["walk_end"]]
        return JobSearchPage(jobs, ends[0] if ends else None)

    async def _check_cursor(self, tenant_id: str, after: str | None) -> None:
        if after is not None and await self.job_view(job_id=after, tenant_id=tenant_id) is None:
            raise errors.InvalidRequest(f"no job with id {after!r} to page after", param="after")

    async def job_events(
        self, *, job_id: str, after_seq: int = 0, limit: int = 1000
    ) -> list[JobEvent]:
        rows = await self._sql.read("job_events", job_id=job_id, after_seq=after_seq, limit=limit)
        return [self._decode.record(JobEvent, row) for row in rows]

    async def usage_for_job(self, *, job_id: str) -> list[UsageEntry]:
        rows = await self._sql.read("usage_for_job", job_id=job_id)
        return [self._decode.record(UsageEntry, row) for row in rows]

    async def outbox_for_job(self, *, job_id: str) -> list[OutboxEntry]:
        rows = await self._sql.read("outbox_for_job", job_id=job_id)
        return [self._decode.record(OutboxEntry, row) for row in rows]

    # -- jobs: the lease holder's side -------------------------------------------------

    async def job_heartbeat(
        self, *, leases: Sequence[Lease], lease_ttl_s: float, now: datetime | None = None
    ) -> list[HeartbeatResult]:
        if not leases:
            return []
        rows = await self._sql.write(
            "job_heartbeat",
            leases=self._sql.codec.json([{"id": x.job_id, "token": x.token} for x in leases]),
            lease_ttl_s=lease_ttl_s,
            now=self._sql.codec.now(now),
        )
        return [HeartbeatResult(row["id"], row["cancel_requested_at"] is not None) for row in rows]

    # -- jobs: everyone else's side ----------------------------------------------------

    async def job_cancel(
        self, *, job_id: str, tenant_id: str, actor: str, now: datetime | None = None
    ) -> Job | None:
        row = await self._sql.write_one(
            "job_cancel", id=job_id, tenant_id=tenant_id, actor=actor, now=self._sql.codec.now(now)
        )
        if row is None:  # not the tenant's, or past cancelling: the job as it stands
            return await self.job_get(job_id=job_id, tenant_id=tenant_id)
        job = self._decode.job(row)
        self.changes.jobs_changed([job.id])
        if job.state is JobState.RUNNING:
            self.changes.cancel_requested([job.id])
        else:
            self.changes.outbox_available()
        return job

    async def job_record_ignored(
        self,
        *,
        job_id: str,
        to_state: JobState,
        actor: str,
        reason: str,
        now: datetime | None = None,
    ) -> None:
        at = self._sql.codec.now(now)
        ignored = RecordIgnoredWrite(job_id, str(to_state), actor, reason, at)
        await self._tx.record_ignored_write(ignored)

    async def job_expire_due(self, *, limit: int, now: datetime | None = None) -> list[str]:
        rows = await self._sql.write("job_expire_due", limit=limit, now=self._sql.codec.now(now))
        expired = [row["id"] for row in rows]
        if expired:
            self.changes.jobs_changed(expired)
            self.changes.outbox_available()
        return expired

    async def job_redrive(
        self, *, job_id: str, tenant_id: str, actor: str, now: datetime | None = None
    ) -> Job | None:
        row = await self._sql.write_one(
            "job_redrive", id=job_id, tenant_id=tenant_id, actor=actor, now=self._sql.codec.now(now)
        )
        if row is None:
            existing = await self.job_get(job_id=job_id, tenant_id=tenant_id)
            if existing is None:
                return None
            raise verdicts.redrive_refused(existing)
        job = self._decode.job(row)
        self.changes.jobs_changed([job.id])
        self.changes.work_available()
        return job

    async def job_purge(
        self, *, job_id: str, tenant_id: str, now: datetime | None = None
    ) -> Job | None:
        row = await self._sql.write_one(
            "job_purge", id=job_id, tenant_id=tenant_id, now=self._sql.codec.now(now)
        )
        return None if row is None else self._decode.job(row)


def _search_query(where: JobFilter) -> str:
    """The job_search statement of a filter: metadata's where PostgreSQL's GIN index finds the
    jobs holding the pairs (on SQLite the bounded walk, as every other search), else the
    bounded walk of the tenant's jobs."""
    return "job_search" if where.metadata is None else "job_search_by_metadata"
