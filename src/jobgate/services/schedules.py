"""Recurring schedules: a cron expression (five fields, UTC) and a job template.
Each slot fires an ordinary job, submitted with the Idempotency-Key `schedule:ID:SLOT`; the
schedule then moves to its next slot by compare-and-set. A restart between the two, or two
schedulers at once, fire the same key again and get the same job back: no run is doubled, and
slots are fired one at a time from the oldest, so none is skipped (a resume after a pause
starts from the next slot, on purpose)."""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import dataclasses
import logging
from datetime import datetime
from typing import Any

from croniter import croniter

from jobgate import errors
from jobgate.domain.job import Job
from jobgate.services.jobs import JobService, SubmitSpec
from jobgate.storage import protocol
from jobgate.storage.records import Schedule

log = logging.getLogger(__name__)

SUBMIT_ROUTE = "schedule"  # the scope of its runs' idempotency keys
FIRE_PAGE = 100  # due slots read at once
FIRE_PAGES = 100  # pages one pass may fire before the loop sleeps
FIRE_CONCURRENCY = 32  # slots submitted at once (concurrent submits share commits)
MAX_CRON_CHARS = 100
_TEMPLATE_FIELDS = frozenset({
    "endpoint", "body", "provider", "metadata", "webhook", "priority", "max_attempts",
    "start_timeout_s", "execution_timeout_s", "concurrency_key", "stream", "on_retry",
})  # fmt: skip


def check_cron(cron: str) -> None:
    """Raise errors.InvalidRequest unless `cron` is a five-field cron expression."""
    if len(cron) > MAX_CRON_CHARS or len(cron.split()) != 5 or not croniter.is_valid(cron):
        raise errors.InvalidRequest(
            "cron must be a five-field cron expression (minute hour day month weekday, UTC)",
            param="cron",
            code="invalid_cron",
        )


def next_slot(cron: str, after: datetime) -> datetime:
    """The first slot of `cron` strictly after `after`. Raises errors.InvalidRequest when
    there is none: a date no month has (`0 0 30 2 *`), or none before the last year a time
    can hold."""
    try:
        slot: datetime = croniter(cron, after).get_next(datetime)
    except (ValueError, OverflowError):  # croniter's "failed to find next date", year 10000
        raise errors.InvalidRequest(
            f"cron {cron!r} never fires: no date matches it (such as 30 February)",
            param="cron",
            code="invalid_cron",
        ) from None
    return slot


def spec_of(template: dict[str, Any]) -> SubmitSpec:
    """The submit a template stands for (its fields were checked when it was stored)."""
    fields = {k: v for k, v in template.items() if k in _TEMPLATE_FIELDS and v is not None}
    return SubmitSpec(**fields)


@dataclasses.dataclass(frozen=True, slots=True)
class Fired:
    """What firing one slot did: the job it stands for (None: not fired, or skipped), and
    whether the schedule moved past the slot."""

    job: Job | None
    advanced: bool


class ScheduleService:
    def __init__(self, jobs: JobService, *, interval_s: float = 1.0) -> None:
        self.jobs = jobs
        self.storage: protocol.ScheduleStorage = jobs.storage
        self._interval_s = interval_s
        self._stop = asyncio.Event()

    async def create(
        self, *, tenant_id: str, cron: str, template: dict[str, Any], paused: bool = False
    ) -> Schedule:
        """Check the cron expression and the template (as a submit would), then store."""
        check_cron(cron)
        unknown = sorted(set(template) - _TEMPLATE_FIELDS)
        if unknown:
            raise errors.InvalidRequest(
                f"job.{unknown[0]} cannot be part of a schedule's job", param=f"job.{unknown[0]}"
            )
        self.jobs.prepare(tenant_id=tenant_id, spec=spec_of(template))  # raises if unrunnable
        now = await self.storage.database_now()
        schedule = Schedule(
            id=self.jobs.ids.new("sched"),
            tenant_id=tenant_id,
            cron=cron,
            template=template,
            paused=paused,
            next_run_at=next_slot(cron, now),
            created_at=now,
        )
        cap = self.jobs.settings.schedules_max_per_tenant
        stored = await self.storage.schedule_insert(schedule=schedule, max_per_tenant=cap)
        if stored is None:
            raise errors.LimitExceeded(
                "schedules_max_per_tenant",
                f"this tenant keeps {cap} schedules, the most it may "
                "(schedules_max_per_tenant); delete some first",
            )
        return stored

    async def list(
        self, *, tenant_id: str, after: str | None, limit: int
    ) -> tuple[builtins.list[Schedule], bool]:
        """A page of the tenant's schedules, oldest first, and whether more follow. An
        `after` of no schedule of the tenant is not found."""
        if after is not None:
            await self.get(tenant_id=tenant_id, schedule_id=after)
        found = await self.storage.schedule_list(tenant_id=tenant_id, after=after, limit=limit + 1)
        return found[:limit], len(found) > limit

    async def get(self, *, tenant_id: str, schedule_id: str) -> Schedule:
        found = await self.storage.schedule_get(schedule_id=schedule_id, tenant_id=tenant_id)
        if found is None:
            raise errors.NotFound("schedule", schedule_id)
        return found

    async def set_paused(self, *, tenant_id: str, schedule_id: str, paused: bool) -> Schedule:
        current = await self.get(tenant_id=tenant_id, schedule_id=schedule_id)
        next_run_at = None
        if not paused and current.paused:  # slots missed while paused are not fired
            next_run_at = next_slot(current.cron, await self.storage.database_now())
        changed = await self.storage.schedule_set_paused(
            schedule_id=schedule_id, tenant_id=tenant_id, paused=paused, next_run_at=next_run_at
        )
        if changed is None:
            raise errors.NotFound("schedule", schedule_id)
        return changed

    async def delete(self, *, tenant_id: str, schedule_id: str) -> None:
        if not await self.storage.schedule_delete(schedule_id=schedule_id, tenant_id=tenant_id):
            raise errors.NotFound("schedule", schedule_id)

    # -- firing --------------------------------------------------------------------------

    async def fire_once(
        self, *, now: datetime | None = None, limit: int = FIRE_PAGE, pages: int = FIRE_PAGES
    ) -> builtins.list[Job]:
        """Fire the due slots, one per schedule per page (a schedule behind by several slots
        catches up over the next pages), `FIRE_CONCURRENCY` at a time (their submits share
        commits), page after page while pages come full and move, at most `pages`. Each page
        is read afresh in turns by tenant (storage.schedule_due), so a slot of a tenant with
        one schedule is fired in the first page after it comes, whatever another tenant has
        due. Answers the jobs the slots stand for."""
        fired: builtins.list[Job] = []
        gate = asyncio.Semaphore(FIRE_CONCURRENCY)

        async def fire(schedule: Schedule) -> Fired:
            async with gate:
                return await self._fire(schedule)

        for _ in range(pages):
            due = await self.storage.schedule_due(limit=limit, now=now)
            outcomes = await asyncio.gather(*(fire(s) for s in due), return_exceptions=True)
            failed = [o for o in outcomes if isinstance(o, BaseException)]
            if failed:  # every other slot of the page went its way first
                raise failed[0]
            done = [o for o in outcomes if not isinstance(o, BaseException)]
            fired += [o.job for o in done if o.job is not None]
            if len(due) < limit or not any(o.advanced for o in done):
                break
        return fired

    async def _fire(self, schedule: Schedule) -> Fired:
        slot = schedule.next_run_at
        key = f"schedule:{schedule.id}:{int(slot.timestamp())}"
        job = None
        try:
            outcome = await self.jobs.submit(
                tenant_id=schedule.tenant_id,
                spec=spec_of(schedule.template),
                raw_body=schedule.template,
                idempotency_key=key,
                route=SUBMIT_ROUTE,
            )
            job = outcome.job
        except (errors.QueueFull, errors.IdempotencyInProgress, errors.StorageError):
            return Fired(None, advanced=False)  # the same slot is tried again on the next pass
        except errors.JobgateError as exc:  # unrunnable now (e.g. its model is gone): skipped
            log.warning(
                "schedule slot not fired",
                extra={"schedule_id": schedule.id, "error_code": exc.code},
            )
        advanced = await self.storage.schedule_advance(
            schedule_id=schedule.id, slot=slot, next_run_at=next_slot(schedule.cron, slot)
        )
        return Fired(job, advanced=advanced)

    def request_stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        """Fire due slots every interval until request_stop()."""
        while not self._stop.is_set():
            try:
                await self.fire_once()
            except errors.StorageError as exc:
                log.warning("schedules: %s", type(exc).__name__)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self._interval_s)
