"""Recurring schedules, on both backends: each slot fires one ordinary job; a crash
between the submit and the advance (a restart) fires the same slot again and gets the same job;
slots behind are fired one at a time, none skipped; paused schedules fire nothing."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from jobgate import errors
from jobgate.process.runtime import Runtime
from jobgate.services.schedules import ScheduleService

pytestmark = pytest.mark.asyncio
TEMPLATE: dict[str, Any] = {
    "endpoint": "/v1/chat/completions",
    "body": {"model": "sim-echo", "messages": [{"role": "user", "content": "tick"}]},
}


async def test_each_slot_fires_one_job(runtime: Runtime) -> None:
    tenant = (await runtime.tenants.create("acme")).tenant
    service = ScheduleService(runtime.jobs)
    schedule = await service.create(tenant_id=tenant.id, cron="*/5 * * * *", template=TEMPLATE)
    slot = schedule.next_run_at
    assert slot.minute % 5 == 0 and slot.second == 0
    assert await service.fire_once(now=slot - timedelta(seconds=1)) == []
    (job,) = await service.fire_once(now=slot)
    assert job.request is not None and job.request["messages"][0]["content"] == "tick"
    assert await service.fire_once(now=slot) == []  # advanced past it
    moved = await service.get(tenant_id=tenant.id, schedule_id=schedule.id)
    assert moved.next_run_at == slot + timedelta(minutes=5)


async def test_a_restart_before_the_advance_does_not_double_the_run(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant = (await runtime.tenants.create("acme")).tenant
    service = ScheduleService(runtime.jobs)
    schedule = await service.create(tenant_id=tenant.id, cron="0 * * * *", template=TEMPLATE)
    slot = schedule.next_run_at

    async def crash(**_: object) -> bool:
        raise errors.StorageUnavailable("the process died here")

    with monkeypatch.context() as patch:
        patch.setattr(runtime.storage, "schedule_advance", crash)
        with pytest.raises(errors.StorageUnavailable):
            await service.fire_once(now=slot)
    restarted = ScheduleService(runtime.jobs)
    (again,) = await restarted.fire_once(now=slot)  # the same slot, fired again
    jobs = await runtime.storage.job_list(tenant_id=tenant.id, limit=10)
    assert [job.id for job in jobs] == [again.id]  # one job for the slot, not two


async def test_slots_missed_while_down_are_each_fired(runtime: Runtime) -> None:
    tenant = (await runtime.tenants.create("acme")).tenant
    service = ScheduleService(runtime.jobs)
    schedule = await service.create(tenant_id=tenant.id, cron="* * * * *", template=TEMPLATE)
    later = schedule.next_run_at + timedelta(minutes=2)  # three slots due
    fired = [job for _ in range(4) for job in await service.fire_once(now=later)]
    assert len({job.id for job in fired}) == 3


async def test_paused_schedules_fire_nothing_and_resume_from_the_next_slot(
    runtime: Runtime,
) -> None:
    tenant = (await runtime.tenants.create("acme")).tenant
    service = ScheduleService(runtime.jobs)
    schedule = await service.create(tenant_id=tenant.id, cron="* * * * *", template=TEMPLATE)
    await service.set_paused(tenant_id=tenant.id, schedule_id=schedule.id, paused=True)
    assert await service.fire_once(now=schedule.next_run_at + timedelta(hours=1)) == []
    resumed = await service.set_paused(tenant_id=tenant.id, schedule_id=schedule.id, paused=False)
    assert not resumed.paused and resumed.next_run_at >= schedule.next_run_at


@pytest.mark.parametrize("cron", ["", "* * * *", "61 * * * *", "* * * * * *", "x" * 200])
async def test_bad_cron_expressions_are_refused(runtime: Runtime, cron: str) -> None:
    tenant = (await runtime.tenants.create("acme")).tenant
    with pytest.raises(errors.InvalidRequest) as caught:
        await ScheduleService(runtime.jobs).create(
            tenant_id=tenant.id, cron=cron, template=TEMPLATE
        )
    assert caught.value.param == "cron"


async def test_an_unrunnable_template_is_refused(runtime: Runtime) -> None:
    tenant = (await runtime.tenants.create("acme")).tenant
    template = {**TEMPLATE, "body": {"model": "gpt-nowhere", "messages": []}}
    with pytest.raises(errors.InvalidRequest):
        await ScheduleService(runtime.jobs).create(
            tenant_id=tenant.id, cron="* * * * *", template=template
        )


async def test_one_tenants_thousands_of_slots_do_not_hold_anothers_back(
    runtime: Runtime,
) -> None:
    """A busy tenant's 300 schedules due at the same minute (and created first) do not delay
    a quiet tenant's one: it fires in the first page, and the pass fires every due slot."""
    busy = (await runtime.tenants.create("busy")).tenant
    quiet = (await runtime.tenants.create("quiet")).tenant
    service = ScheduleService(runtime.jobs)
    made = [
        await service.create(tenant_id=busy.id, cron="* * * * *", template=TEMPLATE)
        for _ in range(300)
    ]
    mine = await service.create(tenant_id=quiet.id, cron="* * * * *", template=TEMPLATE)
    slot = max(s.next_run_at for s in [*made, mine])
    first = await service.fire_once(now=slot, limit=50, pages=1)
    assert len(first) == 50
    assert quiet.id in {job.tenant_id for job in first}
    rest = await service.fire_once(now=slot, limit=50)  # page after page, in one pass
    assert len(first) + len(rest) == 301
