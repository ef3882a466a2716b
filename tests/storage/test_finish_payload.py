"""job_finish's verdicts travel without the fields at their defaults (PostgreSQL parses every
byte of the array): a verdict with every field set and one with every field at its default
are written as they say, in one statement, on both stores."""

from __future__ import annotations

from datetime import timedelta

from jobgate.domain.job import Lease
from jobgate.domain.states import JobState
from jobgate.domain.verdicts import Finish
from jobgate.storage.base import finish_payload
from jobgate.storage.protocol import Storage
from jobgate.testing import FakeClock
from tests.storage.helpers import make_tenant, new_job, submit_one


class _Codec:
    def json(self, value: object) -> object:
        return value

    def flag(self, value: bool | None) -> bool | None:
        return value


def test_a_success_travels_without_its_default_fields() -> None:
    finish = Finish(
        lease=Lease("job_1", "tok"),
        state=JobState.SUCCEEDED,
        reason="completed",
        actor="w",
        result={"ok": True},
        usage={"input_tokens": 1},
        provider_request_id="req",
    )
    payload = finish_payload(finish, _Codec())  # type: ignore[arg-type]
    assert payload == {
        "id": "job_1",
        "token": "tok",
        "state": "succeeded",
        "actor": "w",
        "reason": "completed",
        "result": {"ok": True},
        "usage": {"input_tokens": 1},
        "provider_request_id": "req",
    }


async def test_set_and_default_fields_are_written_as_the_verdict_says(
    storage: Storage, clock: FakeClock
) -> None:
    tenant = await make_tenant(storage)
    for _ in range(2):
        await submit_one(storage, job=new_job(tenant), now=clock.now())
    held = await storage.job_claim(worker_id="w", limit=2, lease_ttl_s=30, now=clock.now())
    every, plain = sorted(held, key=lambda job: job.id)
    assert every.lease_token is not None and plain.lease_token is not None
    now = clock.now()
    finishes = [
        Finish(  # every field away from its default
            lease=Lease(every.id, every.lease_token),
            state=JobState.QUEUED,
            reason="retryable_error",
            actor="reaper:x",
            error={"code": "e", "message": "m", "type": "t"},
            usage={"input_tokens": 2},
            retry_in_s=30.0,
            count_attempt=False,
            dead_lettered=True,
            cancel_outcome="too_late",
            creation_outcome="unknown",
            lost=True,
            provider_request_id="req_1",
        ),
        Finish(lease=Lease(plain.id, plain.lease_token), state=JobState.FAILED, reason="x"),
    ]
    done = await storage.job_finish_many(finishes=finishes, now=now)
    assert [d is not None for d in done] == [True, True]
    again = await storage.job_get(job_id=every.id)
    assert again is not None
    assert again.state is JobState.QUEUED
    assert again.attempt == every.attempt - 1  # refunded
    assert again.lost_count == every.lost_count + 1
    assert again.dead_lettered is True
    assert again.run_at == now + timedelta(seconds=30)
    assert (again.cancel_outcome, again.creation_outcome) == ("too_late", "unknown")
    assert again.error == {"code": "e", "message": "m", "type": "t"}
    assert again.usage == {"input_tokens": 2} and again.provider_request_id == "req_1"
    failed = await storage.job_get(job_id=plain.id)
    assert failed is not None
    assert failed.state is JobState.FAILED and failed.attempt == plain.attempt
    assert failed.lost_count == plain.lost_count and failed.dead_lettered is False
    assert failed.error is None and failed.result is None and failed.cancel_outcome is None
    assert failed.run_at == plain.run_at and failed.completed_at == now
