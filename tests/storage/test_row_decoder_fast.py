"""RowDecoder.job reads a clean row through a generated decoder (no per-column guard calls)
and any other row through the damage guard: the two must answer the same Job for every row,
and the fast one must refuse (raise) every row the guard would mark damaged or refuse."""

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
        "request": {"model": "sim-echo", "messages": [{"role": "user", "content": "hi"}]},
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


POSTGRES = rows.RowDecoder(time=lambda value: value, json=lambda value: value)
SQLITE = rows.RowDecoder(time=rows.unix_time, json=rows.tolerant_json(orjson.loads))

# Each: (what is wrong, a change to a clean PostgreSQL-style row, one to a SQLite-style row).
Poke = Callable[[dict[str, Any]], None]
DAMAGES: list[tuple[str, Poke, Poke]] = [
    (
        "deadline past the latest time",
        lambda r: r.update(deadline_at=datetime(9999, 1, 1, tzinfo=UTC)),
        lambda r: r.update(deadline_at=3e11),
    ),
    (
        "required time missing",
        lambda r: r.update(created_at=None),
        lambda r: r.update(created_at=None),
    ),
    (
        "naive time",
        lambda r: r.update(run_at=datetime(2026, 1, 1)),  # noqa: DTZ001 (the point)
        lambda r: r.update(run_at=float("nan")),
    ),
    (
        "request not an object",
        lambda r: r.update(request=["a"]),
        lambda r: r.update(request='"just text"'),
    ),
    (
        "metadata not JSON",
        lambda r: r.update(metadata=[1, 2]),
        lambda r: r.update(metadata="{not json"),
    ),
    (
        "execution timeout not finite",
        lambda r: r.update(execution_timeout_s=math.inf),
        lambda r: r.update(execution_timeout_s=math.nan),
    ),
    (
        "execution timeout not a number",
        lambda r: r.update(execution_timeout_s="30"),
        lambda r: r.update(execution_timeout_s="30"),
    ),
]


@pytest.mark.parametrize("dialect", ["postgres", "sqlite"])
def test_a_clean_row_takes_the_fast_path_and_reads_as_the_guard_reads_it(dialect: str) -> None:
    decoder = POSTGRES if dialect == "postgres" else SQLITE
    row = _clean() if dialect == "postgres" else _as_sqlite(_clean())
    fast = rows._job_fast()(row, decoder._time, decoder._json, {})  # raises if not taken
    guarded = decoder._job_guarded(row)
    assert fast == guarded == decoder.job(row)
    assert fast.damaged == ()
    assert fast.state is JobState.RUNNING and fast.dead_lettered is False
    for field in dataclasses.fields(Job):  # the same types, not just equal values
        assert type(getattr(fast, field.name)) is type(getattr(guarded, field.name)), field.name


@pytest.mark.parametrize("dialect", ["postgres", "sqlite"])
@pytest.mark.parametrize(
    ("what", "poke_postgres", "poke_sqlite"), DAMAGES, ids=[d[0] for d in DAMAGES]
)
def test_a_damaged_row_is_left_to_the_guard(
    dialect: str, what: str, poke_postgres: Poke, poke_sqlite: Poke
) -> None:
    decoder = POSTGRES if dialect == "postgres" else SQLITE
    if dialect == "postgres":
        row = _clean()
        poke_postgres(row)
    else:
        row = _as_sqlite(_clean())
        poke_sqlite(row)
    with pytest.raises(Exception):  # noqa: B017 (any refusal sends it to the guard)
        rows._job_fast()(row, decoder._time, decoder._json, {})
    assert decoder.job(row) == decoder._job_guarded(row)


def test_an_unknown_state_still_raises() -> None:
    row = _clean()
    row["state"] = "exploded"
    with pytest.raises(ValueError, match="exploded"):
        POSTGRES.job(row)


def test_empty_metadata_and_missing_optionals_read_as_the_guard_reads_them() -> None:
    row = _clean()
    row.update(metadata=None, error=None, execution_timeout_s=None, progress="x", deadline_at=None)
    job = POSTGRES.job(row)
    assert job == POSTGRES._job_guarded(row)
    assert job.metadata == {} and job.progress is None and job.damaged == ()


def test_postgres_times_decode_the_same_from_the_recent_times_memo() -> None:
    epoch = datetime(2000, 1, 1, tzinfo=UTC)
    stamps = [(T0 - epoch) // _US + i for i in range(3 * executor._RECENT_TIMES_MAX)]
    for _ in range(2):  # first built, then (for the latest) looked up
        for us in stamps:
            assert executor._time_decode((us,)) == epoch + (T0 - epoch) + (us - stamps[0]) * _US
            assert len(executor._RECENT_TIMES) <= executor._RECENT_TIMES_MAX
    assert executor._time_decode((2**62,)) == rows.LATEST
    assert executor._time_decode((-(2**62),)) == rows.EARLIEST


def _positional(row: dict[str, Any]) -> tuple[tuple[str, ...], tuple[Any, ...]]:
    """The row as SQLite's claim hands it over: its values in a tuple, its names apart (in an
    order of their own, not Job's)."""
    columns = tuple(reversed(list(row)))
    return columns, tuple(row[name] for name in columns)


def test_a_positional_row_reads_as_the_same_row_by_name() -> None:
    columns, values = _positional(_as_sqlite(_clean()))
    (job,) = SQLITE.jobs_at([values], columns)
    assert job == SQLITE.job(dict(zip(columns, values, strict=True)))
    for field in dataclasses.fields(Job):
        assert type(getattr(job, field.name)) is type(
            getattr(SQLITE._job_guarded(dict(zip(columns, values, strict=True))), field.name)
        ), field.name
    assert SQLITE.jobs_at([], ()) == []


@pytest.mark.parametrize(
    ("what", "poke_postgres", "poke_sqlite"), DAMAGES, ids=[d[0] for d in DAMAGES]
)
def test_a_damaged_positional_row_is_left_to_the_guard(
    what: str, poke_postgres: Poke, poke_sqlite: Poke
) -> None:
    row = _as_sqlite(_clean())
    poke_sqlite(row)
    columns, values = _positional(row)
    _, clean_values = _positional(_as_sqlite(_clean()))
    damaged, clean = SQLITE.jobs_at([values, clean_values], columns)
    assert damaged == SQLITE._job_guarded(row) and damaged.damaged != ()
    assert clean == SQLITE.job(_as_sqlite(_clean())) and clean.damaged == ()


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


@pytest.mark.parametrize("dialect", ["postgres", "sqlite"])
def test_times_found_clean_are_remembered_and_answer_as_a_fresh_decode(dialect: str) -> None:
    """A RowDecoder remembers the stored times its fast decoder found clean: a row read
    through that memo reads as a decoder without one reads it, a damaged time is never
    remembered (its row still goes to the guard, however many clean rows came before), and
    the memo stays bounded."""
    time_ = (lambda value: value) if dialect == "postgres" else rows.unix_time
    json_ = (lambda value: value) if dialect == "postgres" else rows.tolerant_json(orjson.loads)
    decoder = rows.RowDecoder(time=time_, json=json_)
    count = 3 * rows._CLEAN_TIMES_MAX // 2

    def row_at(i: int) -> dict[str, Any]:
        row = _clean()
        row.update(run_at=T0 + i * _US, updated_at=T0 + (i // 100) * _US)
        return row if dialect == "postgres" else _as_sqlite(row)

    for _ in range(2):  # first decoded and remembered, then (partly) looked up
        for i in range(count):
            row = row_at(i)
            fresh = rows.RowDecoder(time=time_, json=json_)
            assert decoder.job(row) == fresh.job(row) == fresh._job_guarded(row)
            assert len(decoder._clean_times) <= rows._CLEAN_TIMES_MAX
    damaged = row_at(0)
    damaged["deadline_at"] = datetime(9999, 1, 1, tzinfo=UTC) if dialect == "postgres" else 3e11
    with pytest.raises(Exception):  # noqa: B017 (any refusal sends it to the guard)
        rows._job_fast()(damaged, time_, json_, decoder._clean_times)
    assert damaged["deadline_at"] not in decoder._clean_times
    job = decoder.job(damaged)
    assert job == decoder._job_guarded(damaged) and job.damaged == ("deadline_at",)


def test_a_positional_row_with_other_columns_reads_as_by_name_and_a_missing_one_refuses() -> None:
    row = {"series": 7, **_as_sqlite(_clean()), "transition_actor": "w"}  # no Job holds these
    columns, values = _positional(row)
    (job,) = SQLITE.jobs_at([values], columns)
    assert job == SQLITE.job(row) and job.damaged == ()
    without = tuple(name for name in columns if name != "lease_token")
    with pytest.raises(ValueError, match="lease_token"):
        SQLITE.jobs_at([tuple(row[name] for name in without)], without)
