"""RowDecoder.record: a record is read from the columns of its fields' names, each converted as
the field's annotation says; a field type it does not know would be taken as stored, so every
record storage decodes is held here to types it knows."""

from __future__ import annotations

import dataclasses
from datetime import UTC, date, datetime
from typing import Any

import orjson
import pytest

from jobgate.domain import costs
from jobgate.domain.job import Job, JobEvent
from jobgate.domain.rollups import QueueDepth, Transition
from jobgate.domain.states import JobState
from jobgate.storage import records, rows

DECODED = [
    records.Tenant,
    records.ApiKey,
    records.UsageEntry,
    records.OutboxEntry,
    records.Schedule,
    records.WebhookEndpoint,
    records.DeliveryAttempt,
    records.FileRecord,
    records.FileChunk,
    records.BatchRecord,
    records.BatchItemResult,
    records.BatchCounts,
    records.TenantOverview,
    records.EndpointHealth,
    records.RetentionBatch,
    records.UsageDay,
    records.LimitOverrides,
    records.OutputChunk,
    JobEvent,
    Transition,
    QueueDepth,
    costs.UsageTotal,
]
AS_STORED = {"str", "str | None", "int | None", "float | None"}
DECODER = rows.RowDecoder(time=rows.unix_time, json=rows.tolerant_json(orjson.loads))


@pytest.mark.parametrize("record", DECODED, ids=lambda record: record.__name__)
def test_every_field_is_converted_or_kept_as_a_plain_value(record: type) -> None:
    for field in dataclasses.fields(record):
        known = str(field.type) in rows._CONVERT or str(field.type) in AS_STORED
        assert known, f"{record.__name__}.{field.name}: {field.type}"


def test_columns_are_converted_by_annotation() -> None:
    stored = {
        "id": "we_1",
        "tenant_id": "ten_1",
        "url": "https://example.com/hook",
        "description": "",
        "event_types": '["job.succeeded"]',
        "include_result": 1,
        "disabled": 0,
        "disabled_reason": None,
        "secret": "s1",
        "previous_secret": None,
        "previous_secret_expires_at": None,
        "created_at": 0.0,
        "updated_at": 1.5,
        "progress_interval_s": 5,
    }
    endpoint = DECODER.record(records.WebhookEndpoint, stored)
    assert endpoint.event_types == ("job.succeeded",)
    assert (endpoint.include_result, endpoint.disabled) == (True, False)
    assert endpoint.updated_at == datetime(1970, 1, 1, 0, 0, 1, 500000, tzinfo=UTC)
    assert endpoint.previous_secret_expires_at is None
    assert endpoint.progress_interval_s == 5.0 and isinstance(endpoint.progress_interval_s, float)
    with pytest.raises(ValueError, match="required time"):
        DECODER.record(records.WebhookEndpoint, {**stored, "created_at": None})


def test_states_dates_and_empty_sums() -> None:
    event = {"job_id": "j", "seq": 1, "from_state": None, "to_state": "queued", "actor": "api"}
    read = DECODER.record(JobEvent, {**event, "reason": None, "applied": 1, "created_at": 0})
    assert (read.from_state, read.to_state, read.applied) == (None, JobState.QUEUED, True)
    total = {"tenant_id": "t", "provider": "p", "model": None, "input_tokens": None}
    usage = DECODER.record(
        costs.UsageTotal,
        {
            **total,
            "output_tokens": 7,
            "cache_read_tokens": None,
            "cache_write_tokens": 0,
            "concurrency_key": None,
            "native_batch": 0,  # SQLite's false
        },
    )
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens) == (0, 7, 0)
    assert usage.concurrency_key is None and usage.native_batch is False
    day = {"tenant_id": "t", "day": "2026-01-02", "provider": "p", "model": "", "jobs": 1}
    counts = {
        "input_tokens": 1,
        "output_tokens": 2,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
    }
    assert DECODER.record(records.UsageDay, {**day, **counts}).day == date(2026, 1, 2)


def test_a_decoded_job_holds_each_column_converted() -> None:
    stored: dict[str, Any] = {field.name: None for field in dataclasses.fields(Job)}
    stored.update(
        id="job_1",
        tenant_id="ten_1",
        state="running",
        api="jobs",
        provider="sim",
        endpoint="/v1/chat/completions",
        model="sim-echo",
        request='{"model": "sim-echo"}',
        metadata='{"n": 1}',
        priority=5,
        attempt=1,
        max_attempts=3,
        run_count=1,
        lost_count=0,
        run_at=1.0,
        created_at=1.0,
        updated_at=2.5,
        started_at=2.5,
        lease_owner="w",
        lease_token="t",
        lease_expires_at=62.5,
        dead_lettered=0,
        event_seq=2,
        provider_generation=0,
        execution_timeout_s=1e400,
        progress=0.5,
    )
    decoded = DECODER.job(stored)
    assert type(decoded) is Job and decoded.id == "job_1" and decoded.metadata == {"n": 1}
    assert decoded.updated_at == datetime(1970, 1, 1, 0, 0, 2, 500000, tzinfo=UTC)
    assert decoded.dead_lettered is False and decoded.lease_expires_at is not None
    assert decoded.state is JobState.RUNNING and decoded.damaged == ("execution_timeout_s",)
    assert decoded.request == {"model": "sim-echo"} and decoded.progress == 0.5
