"""postgres.batch.insert_payload: a new job as the batch statements' JSON array takes it, one
dict per job, a member that would be null left out (jsonb_to_recordset reads a missing member
as NULL, as it reads null): what the rows hold is pinned by test_insert_answers."""

from __future__ import annotations

from datetime import UTC, datetime

from jobgate.storage.postgres.batch import insert_params, insert_payload
from jobgate.storage.postgres.executor import PostgresCodec
from jobgate.storage.records import Tenant
from tests.storage.helpers import new_job

TENANT = Tenant(
    id="ten_acme", name="acme", webhook_secret="whsec", created_at=datetime(2026, 12, 3, tzinfo=UTC)
)
NULLABLE = ("webhook", "start_timeout_s", "run_at", "concurrency_key", "model_route")


def test_the_usual_job_leaves_its_null_members_out() -> None:
    payload = insert_payload(new_job(TENANT, execution_timeout_s=60.0), PostgresCodec())
    assert not set(NULLABLE) & set(payload)
    assert None not in payload.values()
    full = {**insert_params(new_job(TENANT), PostgresCodec()), "run_at": None}
    assert set(payload) | set(NULLABLE) == set(full)  # every other member is there


def test_a_job_with_every_member_has_them_all_as_before() -> None:
    run_at = datetime(2026, 12, 3, 7, 0, 0, 123456, tzinfo=UTC)
    job = new_job(
        TENANT,
        webhook={"url": "https://example.com/h", "event_types": []},
        start_timeout_s=30.0,
        execution_timeout_s=12.5,
        run_at=run_at,
        delay_s=0.0,
        concurrency_key="k",
        model_route="smart",
        priority=9,
        max_attempts=1,
    )
    codec = PostgresCodec()
    before = {**insert_params(job, codec), "run_at": run_at.isoformat()}  # the old composition
    assert insert_payload(job, codec) == before
