"""postgres.insert_many.insert_payload: a new job as the batch statements' JSON array takes it, one
dict per job, a member the statements would read as a missing one left out (null; an empty
metadata and a zero delay, which the insert coalesces): what the rows hold is pinned by
test_insert_answers on every insert path."""

from __future__ import annotations

from datetime import UTC, datetime

from jobgate.storage.postgres.executor import PostgresCodec
from jobgate.storage.postgres.insert_many import insert_params, insert_payload
from jobgate.storage.records import Tenant
from tests.storage.helpers import new_job

TENANT = Tenant(
    id="ten_acme", name="acme", webhook_secret="whsec", created_at=datetime(2026, 12, 3, tzinfo=UTC)
)
OMITTED = (
    "model",
    "metadata",
    "webhook",
    "start_timeout_s",
    "execution_timeout_s",
    "run_at",
    "delay_s",
    "concurrency_key",
    "model_route",
)


def test_the_usual_job_leaves_out_what_reads_as_missing() -> None:
    job = new_job(TENANT, model=None, metadata={}, delay_s=0.0)
    payload = insert_payload(job, PostgresCodec())
    assert not set(OMITTED) & set(payload)
    assert None not in payload.values()
    full = {**insert_params(job, PostgresCodec()), "run_at": None}
    assert set(payload) | set(OMITTED) == set(full)  # every other member is there
    assert payload == {name: full[name] for name in payload}


def test_a_job_with_every_member_has_them_all_as_before() -> None:
    run_at = datetime(2026, 12, 3, 7, 0, 0, 123456, tzinfo=UTC)
    job = new_job(
        TENANT,
        webhook={"url": "https://example.com/h", "event_types": []},
        start_timeout_s=30.0,
        execution_timeout_s=12.5,
        run_at=run_at,
        delay_s=5.0,  # (the edge refuses both with run_at; the payload carries what it gets)
        metadata={"k": "v"},
        concurrency_key="k",
        model_route="smart",
        priority=9,
        max_attempts=1,
    )
    codec = PostgresCodec()
    before = {**insert_params(job, codec), "run_at": run_at.isoformat()}  # the old composition
    assert insert_payload(job, codec) == before
