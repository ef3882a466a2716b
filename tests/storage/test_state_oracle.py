"""The SQL held to the state machine's oracle: for every (source state, attempted transition)
pair, the storage API applies the move exactly when `domain.states.transition()` answers
APPLY, and otherwise leaves the job where it was (IGNORE: a late or duplicate event; refused:
InvalidTransition). Both backends (`storage` is parametrized over SQLite and PostgreSQL)."""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from datetime import timedelta

from jobgate import errors
from jobgate.domain.job import Job, Lease
from jobgate.domain.states import InvalidTransition, JobState, Verdict, transition
from jobgate.domain.verdicts import Finish
from jobgate.storage.protocol import Storage
from jobgate.testing import FakeClock
from tests.storage.helpers import make_tenant, new_job, submit_one

Q, R, S, F, C, E = (
    JobState.QUEUED,
    JobState.RUNNING,
    JobState.SUCCEEDED,
    JobState.FAILED,
    JobState.CANCELLED,
    JobState.EXPIRED,
)
START_DEADLINE_S = 60  # every job may expire, so that `-> expired` can be attempted


class Case:
    """One job, alone on its provider, so that claims and expiries of other cases miss it."""

    def __init__(self, storage: Storage, clock: FakeClock, tenant_id: str, n: int) -> None:
        self.storage = storage
        self.clock = clock
        self.tenant_id = tenant_id
        self.provider = f"oracle{n}"
        self.token = "lt_never_claimed"  # the lease a late verdict names
        self.job_id = ""

    async def queued(self, tenant: object) -> None:
        job = new_job(
            tenant,  # type: ignore[arg-type]
            provider=self.provider,
            start_timeout_s=START_DEADLINE_S,
        )
        self.job_id = (await submit_one(self.storage, job=job, now=self.clock.now())).job.id

    async def claim(self) -> None:
        claimed = await self.storage.job_claim(
            worker_id="w1",
            limit=5,
            lease_ttl_s=600,
            providers=[self.provider],
            now=self.clock.now(),
        )
        for job in claimed:
            if job.id == self.job_id and job.lease_token is not None:
                self.token = job.lease_token

    async def finish(self, state: JobState, **fields: object) -> None:
        verdict = Finish(
            lease=Lease(self.job_id, self.token),
            state=state,
            reason="oracle",
            actor="w1",
            result={"ok": True} if state is S else None,
            **fields,  # type: ignore[arg-type]
        )
        await self.storage.job_finish_many(finishes=[verdict], now=self.clock.now())

    async def cancel(self) -> None:
        await self.storage.job_cancel(
            job_id=self.job_id, tenant_id=self.tenant_id, actor="api", now=self.clock.now()
        )

    async def expire_due(self) -> None:
        later = self.clock.now() + timedelta(seconds=2 * START_DEADLINE_S)
        await self.storage.job_expire_due(limit=1000, now=later)

    async def job(self) -> Job:
        job = await self.storage.job_get(job_id=self.job_id)
        assert job is not None
        return job


async def into(case: Case, state: JobState, tenant: object) -> None:
    """Drive a fresh job into `state` the way production does."""
    await case.queued(tenant)
    if state is Q:
        return
    if state is C:
        await case.cancel()
        return
    if state is E:
        await case.expire_due()
        return
    await case.claim()
    if state is S:
        await case.finish(S)
    elif state is F:
        await case.finish(F, dead_lettered=True)


# Every storage operation that asks for a move into the target state. A verdict names the lease
# the job was claimed under (a late verdict, for a job that has left `running`).
ATTEMPTS: dict[JobState, Callable[[Case], Awaitable[None]]] = {
    Q: lambda case: case.finish(Q),  # a retry
    R: lambda case: case.claim(),
    S: lambda case: case.finish(S),
    F: lambda case: case.finish(F),
    C: lambda case: cancel_then_confirm(case),
    E: lambda case: case.expire_due(),
}


async def cancel_then_confirm(case: Case) -> None:
    """A queued job is cancelled at once; a running one when its lease holder confirms."""
    await case.cancel()
    await case.finish(C, cancel_outcome="interrupted")


def oracle(source: JobState, target: JobState, *, redrive: bool = False) -> bool:
    """Whether transition() lets the move apply."""
    try:
        return transition(source, target, redrive=redrive) is Verdict.APPLY
    except InvalidTransition:
        return False


async def test_the_sql_moves_a_job_exactly_when_the_state_machine_allows_it(
    storage: Storage, clock: FakeClock
) -> None:
    tenant = await make_tenant(storage)
    disagreements = []
    for n, (source, target) in enumerate(itertools.product(JobState, JobState)):
        case = Case(storage, clock, tenant.id, n)
        await into(case, source, tenant)
        assert (await case.job()).state is source, (source, "setup")
        await ATTEMPTS[target](case)
        after = (await case.job()).state
        expected = target if oracle(source, target) else source
        if after is not expected:
            disagreements.append(f"{source} -> {target}: SQL left {after}, oracle {expected}")
    assert disagreements == []


async def test_only_a_failed_job_can_be_redriven(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    disagreements = []
    for n, source in enumerate(JobState):
        case = Case(storage, clock, tenant.id, 100 + n)
        await into(case, source, tenant)
        refused = False
        try:
            await storage.job_redrive(
                job_id=case.job_id, tenant_id=tenant.id, actor="op", now=clock.now()
            )
        except errors.Conflict:
            refused = True
        after = (await case.job()).state
        allowed = oracle(source, Q, redrive=True)
        expected = Q if allowed else source
        if after is not expected or refused is allowed:
            disagreements.append(f"redrive {source}: SQL left {after} (refused: {refused})")
    assert disagreements == []
