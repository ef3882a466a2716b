"""RowDecoder.job: a job row read as a Job, by name (a mapping) or by position (SQLite's claim),
on PostgreSQL's codec (times and JSON already decoded) and SQLite's (Unix seconds, JSON text).
A stored value no job may hold is clamped or emptied and its column named in `damaged`, never
raised; a time found clean is remembered, and a row read through that memo reads the same."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from jobgate.domain.job import Job
from jobgate.domain.states import JobState
from jobgate.storage import rows
from jobgate.storage.postgres import executor
from jobgate.storage.sqlite import executor as sqlite_executor
from jobgate.testing import FakeClock

T0 = datetime(2026, 12, 2, 15, 0, tzinfo=UTC)
_US = timedelta(microseconds=1)
REQUEST = {"model": "sim-echo", "messages": [{"role": "user", "content": "hi"}]}


def _clean() -> dict[str, Any]:
    """A running job's row as the claim returns it (Python values, PostgreSQL's codec)."""
    return {
        "id": "job_1",
        "tenant_id": "ten_1",
        "state": "running",
        "api": "jobs",
        "provider": "sim",
        "endpoint": "/v1/chat/completions",
        "model": "sim-echo",
        "request": REQUEST,
        "metadata": {"k": "v"},
        "webhook": None,
        "result": None,
        "error": {"code": "x", "message": "m", "type": "t"},
        "usage": None,
        "priority": 5,
        "attempt": 1,
        "max_attempts": 3,
        "run_count": 1,
        "lost_count": 0,
        "run_at": T0,
        "created_at": T0,
        "updated_at": T0,
        "started_at": T0,
        "completed_at": None,
        "cancel_requested_at": None,
        "expires_at": None,
        "execution_timeout_s": 30.5,
        "deadline_at": T0,
        "lease_owner": "w",
        "lease_token": "tok",
        "lease_expires_at": T0,
        "phase": "awaiting_provider",
        "provider_job_id": None,
        "creation_outcome": None,
        "cancel_outcome": None,
        "reconcile_at": None,
        "dead_lettered": 0,
        "purged_at": None,
        "event_seq": 2,
        "provider_generation": 0,
        "concurrency_key": None,
        "model_route": None,
        "reconciled_at": None,
        "progress": 0.5,
        "provider_request_id": None,
    }


def _as_sqlite(row: dict[str, Any]) -> dict[str, Any]:
    """The same row as SQLite stores it: times as Unix seconds, JSON as text."""
    out = dict(row)
    for name, value in row.items():
        if isinstance(value, datetime):
            out[name] = value.timestamp()
        elif isinstance(value, dict):
            out[name] = orjson.dumps(value).decode()
    return out


def _decoder(dialect: str) -> rows.RowDecoder:
    if dialect == "postgres":
        return rows.RowDecoder(time=lambda value: value, json=lambda value: value)
    return rows.RowDecoder(time=rows.unix_time, json=rows.tolerant_json(orjson.loads))


def _row(dialect: str) -> dict[str, Any]:
    return _clean() if dialect == "postgres" else _as_sqlite(_clean())


def _positional(row: dict[str, Any]) -> tuple[tuple[str, ...], tuple[Any, ...]]:
    """The row as SQLite's claim hands it over: its values in a tuple, its names apart (in an
    order of their own, not Job's)."""
    columns = tuple(reversed(list(row)))
    return columns, tuple(row[name] for name in columns)


DIALECTS = ["postgres", "sqlite"]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_clean_row_reads_as_the_job_it_holds(dialect: str) -> None:
    job = _decoder(dialect).job(_row(dialect))
    assert job == Job(
        **{**_clean(), "state": JobState.RUNNING, "dead_lettered": False, "damaged": ()}
    )
    assert job.state is JobState.RUNNING and job.dead_lettered is False
    assert job.run_at.tzinfo is not None and job.request == REQUEST


Poke = Callable[[dict[str, Any]], None]
# Each: what is wrong, a change to a clean PostgreSQL-style row and one to a SQLite-style row,
# and what the job then reads: its damaged columns and the values of the columns poked.
DAMAGES: list[tuple[str, Poke, Poke, tuple[str, ...], dict[str, Any]]] = [
    (
        "deadline past the latest time",
        lambda r: r.update(deadline_at=datetime(9999, 1, 1, tzinfo=UTC)),
        lambda r: r.update(deadline_at=3e11),
        ("deadline_at",),
        {"deadline_at": rows.LATEST},
    ),
    (
        "started before the earliest time",
        lambda r: r.update(started_at=datetime(2, 1, 1, tzinfo=UTC)),
        lambda r: r.update(started_at=-1e12),
        ("started_at",),
        {"started_at": rows.EARLIEST},
    ),
    (
        "required time missing",
        lambda r: r.update(created_at=None),
        lambda r: r.update(created_at=None),
        ("created_at",),
        {"created_at": rows.EARLIEST},
    ),
    (
        "request not an object",
        lambda r: r.update(request=["a"]),
        lambda r: r.update(request='"just text"'),
        ("request",),
        {"request": None},
    ),
    (
        "metadata not an object",
        lambda r: r.update(metadata=[1, 2]),
        lambda r: r.update(metadata="{not json"),
        ("metadata",),
        {"metadata": {}},
    ),
    (
        "execution timeout not finite",
        lambda r: r.update(execution_timeout_s=math.inf),
        lambda r: r.update(execution_timeout_s=math.nan),
        ("execution_timeout_s",),
        {"execution_timeout_s": None},
    ),
    (
        "execution timeout not a number",
        lambda r: r.update(execution_timeout_s="30"),
        lambda r: r.update(execution_timeout_s="30"),
        ("execution_timeout_s",),
        {"execution_timeout_s": None},
    ),
    (
        "several columns, named in field order",
        lambda r: r.update(lease_expires_at=datetime(9999, 1, 1, tzinfo=UTC), request=[1]),
        lambda r: r.update(lease_expires_at=3e11, request="[1]"),
        ("request", "lease_expires_at"),
        {"request": None, "lease_expires_at": rows.LATEST},
    ),
]


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize(
    ("what", "poke_postgres", "poke_sqlite", "damaged", "reads"),
    DAMAGES,
    ids=[d[0] for d in DAMAGES],
)
def test_a_damaged_column_is_clamped_or_emptied_and_named(
    dialect: str,
    what: str,
    poke_postgres: Poke,
    poke_sqlite: Poke,
    damaged: tuple[str, ...],
    reads: dict[str, Any],
) -> None:
    row = _row(dialect)
    (poke_postgres if dialect == "postgres" else poke_sqlite)(row)
    job = _decoder(dialect).job(row)
    assert job.damaged == damaged
    assert {name: getattr(job, name) for name in reads} == reads
    untouched = {f.name for f in dataclasses.fields(Job)} - set(reads) - {"damaged", "state"}
    clean = _decoder(dialect).job(_row(dialect))
    assert {n: getattr(job, n) for n in untouched} == {n: getattr(clean, n) for n in untouched}


def test_a_time_the_codec_cannot_read_is_none_or_the_earliest_when_required() -> None:
    row = _as_sqlite(_clean())
    row.update(run_at=float("nan"), started_at="not a time")
    job = _decoder("sqlite").job(row)
    assert (job.run_at, job.started_at) == (rows.EARLIEST, None)
    assert job.damaged == ("run_at",)  # an optional time no codec reads is as good as none


def test_a_naive_time_reads_as_utc_and_is_not_damaged() -> None:
    row = _clean()
    row["run_at"] = datetime(2026, 1, 1)  # noqa: DTZ001 (the point)
    job = _decoder("postgres").job(row)
    assert job.run_at == datetime(2026, 1, 1, tzinfo=UTC) and job.damaged == ()


def test_an_unknown_state_raises() -> None:
    row = _clean()
    row["state"] = "exploded"
    with pytest.raises(ValueError, match="exploded"):
        _decoder("postgres").job(row)


def test_empty_metadata_and_missing_optionals() -> None:
    row = _clean()
    row.update(metadata=None, error=None, execution_timeout_s=None, progress="x", deadline_at=None)
    job = _decoder("postgres").job(row)
    assert job.metadata == {} and job.error is None and job.execution_timeout_s is None
    assert job.progress is None and job.deadline_at is None and job.damaged == ()


@pytest.mark.parametrize("dialect", DIALECTS)
def test_times_found_clean_are_remembered_and_answer_as_a_fresh_decode(dialect: str) -> None:
    """A row read through the decoder's memo of clean times reads as a decoder without one
    reads it, a damaged time is never remembered, and the memo stays bounded."""
    decoder = _decoder(dialect)
    count = 3 * rows._CLEAN_TIMES_MAX // 2

    def row_at(i: int) -> dict[str, Any]:
        row = _clean()
        row.update(run_at=T0 + i * _US, updated_at=T0 + (i // 100) * _US)
        return row if dialect == "postgres" else _as_sqlite(row)

    for _ in range(2):  # first decoded and remembered, then (partly) looked up
        for i in range(count):
            row = row_at(i)
            job = decoder.job(row)
            assert job == _decoder(dialect).job(row) and job.run_at == T0 + i * _US
            assert len(decoder._clean_times) <= rows._CLEAN_TIMES_MAX
    damaged = row_at(0)
    damaged["deadline_at"] = datetime(9999, 1, 1, tzinfo=UTC) if dialect == "postgres" else 3e11
    for _ in range(2):
        assert decoder.job(damaged).damaged == ("deadline_at",)
        assert damaged["deadline_at"] not in decoder._clean_times


def test_a_positional_row_reads_as_the_same_row_by_name() -> None:
    columns, values = _positional(_as_sqlite(_clean()))
    (job,) = _decoder("sqlite").jobs_at([values], columns)
    assert job == _decoder("sqlite").job(_as_sqlite(_clean()))
    assert _decoder("sqlite").jobs_at([], ()) == []


def test_a_damaged_positional_row_is_read_alone() -> None:
    row = _as_sqlite(_clean())
    row["deadline_at"] = 3e11
    columns, values = _positional(row)
    _, clean_values = _positional(_as_sqlite(_clean()))
    damaged, clean = _decoder("sqlite").jobs_at([values, clean_values], columns)
    assert damaged.damaged == ("deadline_at",) and damaged.deadline_at == rows.LATEST
    assert clean == _decoder("sqlite").job(_as_sqlite(_clean())) and clean.damaged == ()


def test_a_positional_row_with_other_columns_reads_as_by_name_and_a_missing_one_refuses() -> None:
    row = {"series": 7, **_as_sqlite(_clean()), "transition_actor": "w"}  # no Job holds these
    columns, values = _positional(row)
    (job,) = _decoder("sqlite").jobs_at([values], columns)
    assert job == _decoder("sqlite").job(row) and job.damaged == ()
    without = tuple(name for name in columns if name != "lease_token")
    with pytest.raises(ValueError, match="lease_token"):
        _decoder("sqlite").jobs_at([tuple(row[name] for name in without)], without)


def test_postgres_times_decode_the_same_from_the_recent_times_memo() -> None:
    epoch = datetime(2000, 1, 1, tzinfo=UTC)
    stamps = [(T0 - epoch) // _US + i for i in range(3 * executor._RECENT_TIMES_MAX)]
    for _ in range(2):  # first built, then (for the latest) looked up
        for us in stamps:
            assert executor._time_decode((us,)) == epoch + (T0 - epoch) + (us - stamps[0]) * _US
            assert len(executor._RECENT_TIMES) <= executor._RECENT_TIMES_MAX
    assert executor._time_decode((2**62,)) == rows.LATEST
    assert executor._time_decode((-(2**62),)) == rows.EARLIEST


def test_sqlite_times_decode_the_same_from_the_recent_times_memo() -> None:
    codec = sqlite_executor.SqliteCodec(FakeClock())
    stamps = [T0.timestamp() + i / 7 for i in range(3 * sqlite_executor._RECENT_TIMES_MAX)]
    for _ in range(2):  # first decoded, then (for the latest) looked up
        for stamp in stamps:
            assert codec.time_out(stamp) == rows.unix_time(stamp)
            assert len(codec._recent_times) <= sqlite_executor._RECENT_TIMES_MAX
    assert codec.time_out(None) is None
    for _ in range(2):  # a value that is no time raises every time, memo or not
        with pytest.raises(ValueError):
            codec.time_out(float("nan"))
        with pytest.raises(ValueError):
            codec.time_out("not a time")
    assert codec.time_out(3e11) == rows.LATEST  # clamped as before
