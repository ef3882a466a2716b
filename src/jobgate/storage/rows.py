"""Turning database rows into records; each dialect supplies how it stores times and JSON.

Decoding a job never raises because of a stored value: a row written by hand or before the edge
checked its values (a time past year 9999, JSON that does not parse, a request that is not an
object) is read with that column clamped or emptied and named in `Job.damaged`, so that reads,
lists and cancels still answer and the worker can fail that job alone (`poison_job`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import operator
from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime
from typing import Any, Protocol, TypeVar, cast

from jobgate.domain.job import Job
from jobgate.domain.states import JobState
from jobgate.storage.records import (
    ENDPOINT_ACTIVE,
    ENDPOINT_DISABLED,
    ENDPOINT_MISSING,
    Delivery,
    OutboxEntry,
)


class RowLike(Protocol):
    """A sqlite3.Row, an asyncpg.Record or a dict: anything indexable by column name."""

    def __getitem__(self, key: str, /) -> Any: ...

    def keys(self) -> Any: ...


TimeDecoder = Callable[[Any], datetime | None]
JsonDecoder = Callable[[Any], Any]
R = TypeVar("R")

# What a stored time past what Python can hold reads as: far enough from datetime's own limits
# (years 1 and 9999) that adding or subtracting a stored interval to it cannot overflow.
LATEST = datetime(9000, 1, 1, tzinfo=UTC)
EARLIEST = datetime(1000, 1, 1, tzinfo=UTC)
# The longest interval storage adds to a time (a start or execution timeout): ten years. The
# SQL of both dialects repeats this number where it clamps.
MAX_INTERVAL_S = 10 * 365 * 86400
_LATEST_S = LATEST.timestamp()
_EARLIEST_S = EARLIEST.timestamp()


def clamp_time(value: datetime) -> datetime:
    """A time inside [EARLIEST, LATEST] (a naive one is taken as UTC)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return min(max(value, EARLIEST), LATEST)


def unix_time(seconds: Any) -> datetime | None:
    """Unix seconds (SQLite's REAL times) as a UTC datetime, clamped; never raises. None for
    NULL and for what is not a number at all."""
    if seconds is None:
        return None
    try:
        value = float(seconds)
    except (TypeError, ValueError):
        return None
    if _EARLIEST_S < value < _LATEST_S:  # the common case, first (NaN fails every comparison)
        return datetime.fromtimestamp(value, UTC)
    if math.isnan(value):
        return None
    return LATEST if value >= _LATEST_S else EARLIEST


def tolerant_json(fast: JsonDecoder) -> JsonDecoder:
    """`fast` (orjson), falling back to the standard library for what orjson refuses but JSON
    allows (integers past 64 bits, 1e999, lone surrogates); raises only for text that is not
    JSON at all. What the fallback reads is made fit to be served again as JSON: an integer
    past 64 bits becomes a float, a lone surrogate U+FFFD."""

    def decode(value: Any) -> Any:
        try:
            return fast(value)
        except ValueError:
            return _fit(json.loads(value, parse_int=_int_or_float))

    return decode


def _int_or_float(text: str) -> int | float:
    number = int(text)
    return number if -(2**63) <= number < 2**64 else float(text)


def _fit(value: Any) -> Any:
    if isinstance(value, str):
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, list):
        return [_fit(item) for item in value]
    if isinstance(value, dict):
        return {_fit(key): _fit(item) for key, item in value.items()}
    return value


class RowDecoder:
    """Every record storage reads, decoded from a row by one dialect's time and JSON codec."""

    def __init__(self, *, time: TimeDecoder, json: JsonDecoder) -> None:
        self._time = time
        self._json = json
        # Stored times -> the times decoded from them and found clean: the
        # jobs of one claim share their claim's times, those of one submit batch theirs, so
        # most of a claimed job's times are one lookup (no codec call, no bounds check).
        self._clean_times: dict[Any, datetime] = {}

    def job(self, row: RowLike) -> Job:
        """A job, each damaged column clamped or emptied and named in `damaged` (never raises
        for a stored value; an unknown state raises ValueError, as JobState does)."""
        return self._job(list(_by_name(row)))

    def jobs_at(self, rows: Sequence[Sequence[Any]], columns: tuple[str, ...]) -> list[Job]:
        """`job` for each row fetched as a plain tuple whose column names are `columns`
        (SQLite's claim: the writer thread then builds no mapping per claimed job); columns
        no Job holds are left out, a missing one raises ValueError."""
        if not rows:
            return []
        pick, job = _job_columns_at(columns), self._job
        return [job(list(pick(row))) for row in rows]

    def _job(self, values: list[Any]) -> Job:
        """The Job of a row's values in Job's field order (`damaged` left out), converted in
        place: times decoded (a clean one remembered), JSON objects parsed, the state looked
        up; a value no job may hold clamped or emptied and its column named damaged."""
        damaged: list[int] = []
        clean = self._clean_times
        for i in _TIMES:
            raw = values[i]
            if raw is not None:
                values[i] = clean.get(raw) or self._new_time(raw, i, damaged)
        for i in _REQUIRED_TIMES:
            if values[i] is None:
                values[i] = EARLIEST
                if i not in damaged:
                    damaged.append(i)
        decode = self._json
        for i in _OBJECTS:
            raw = values[i]
            if raw is not None:
                try:
                    value = decode(raw)
                except (ValueError, TypeError):
                    value = _NOT_AN_OBJECT
                if value is not None and not isinstance(value, dict):
                    damaged.append(i)
                    value = None
                values[i] = value
        if values[_METADATA] is None:
            values[_METADATA] = {}
        values[_STATE] = _STATES.get(values[_STATE]) or JobState(values[_STATE])
        values[_DEAD_LETTERED] = bool(values[_DEAD_LETTERED])
        timeout = values[_EXECUTION_TIMEOUT]
        if timeout is not None and not (isinstance(timeout, _NUMBER) and math.isfinite(timeout)):
            values[_EXECUTION_TIMEOUT] = None
            damaged.append(_EXECUTION_TIMEOUT)
        values[_PROGRESS] = _finite_or_none(values[_PROGRESS])
        values.insert(_DAMAGED, _damaged_names(damaged) if damaged else ())
        return Job(*values)

    def _new_time(self, raw: Any, i: int, damaged: list[int]) -> datetime | None:
        """A stored time not met before: decoded, remembered when clean, else clamped (a time
        at either bound is named damaged) or None (a value the codec cannot read: damaged)."""
        try:
            moment = self._time(raw)
        except (ValueError, OverflowError, OSError, TypeError):
            damaged.append(i)
            return None
        if moment is None:
            return None
        if moment.tzinfo is not None and EARLIEST < moment < LATEST:
            clean = self._clean_times
            if len(clean) >= _CLEAN_TIMES_MAX:
                clean.clear()
            clean[raw] = moment
            return moment
        clamped = clamp_time(moment)
        if clamped in (LATEST, EARLIEST):
            damaged.append(i)
        return clamped

    def record(self, record: type[R], row: RowLike, /) -> R:
        """A `record` (a dataclass) whose fields are read from the row's columns of the same
        names, each converted as its annotation says (`_CONVERT`); a value that is no such
        thing raises (ValueError, TypeError)."""
        plan = _plan(cast(type, record))
        return record(
            *[row[name] if conv is None else conv(self, row[name]) for name, conv in plan]
        )

    def delivery(self, row: RowLike) -> Delivery:
        """A claimed outbox row joined with its endpoint (e_*) and tenant (tenant_secret)."""
        entry = self.record(OutboxEntry, row)
        url: str | None
        secrets: tuple[str, ...]
        if entry.endpoint_id is None:  # the job's own URL, signed with the tenant's secret
            url, secrets, include_result = entry.url, (row["tenant_secret"],), False
            state = ENDPOINT_ACTIVE
        elif row["e_url"] is None:
            url, secrets, include_result, state = None, (), False, ENDPOINT_MISSING
        else:
            url = row["e_url"]
            secrets = tuple(s for s in (row["e_secret"], row["e_previous_secret"]) if s)
            include_result = bool(row["e_include_result"])
            state = ENDPOINT_DISABLED if row["e_disabled"] else ENDPOINT_ACTIVE
        return Delivery(
            entry=entry,
            lease_token=row["lease_token"],
            url=url,
            secrets=secrets,
            include_result=include_result,
            endpoint_state=state,
            job_created_at=self._time(row["job_created_at"]),
        )


def _required(moment: datetime | None) -> datetime:
    if moment is None:
        raise ValueError("a required time column is NULL")
    return moment


def _tuple(items: Any) -> tuple[Any, ...] | None:
    return None if items is None else tuple(items)


Convert = Callable[[RowDecoder, Any], Any]
# How a record's field is read from its column, by the field's annotation (as written in the
# record's module); a field whose annotation is not here is taken as stored.
_CONVERT: dict[str, Convert] = {
    "datetime": lambda d, value: _required(d._time(value)),
    "datetime | None": lambda d, value: d._time(value),
    "date": lambda d, value: date.fromisoformat(str(value)),  # a date, or ISO text (SQLite)
    "bool": lambda d, value: bool(value),
    "int": lambda d, value: int(value or 0),  # a SUM over no rows is NULL
    "float": lambda d, value: float(value),  # SQLite gives back a whole REAL as it was stored
    "bytes": lambda d, value: bytes(value),
    "JobState": lambda d, value: JobState(value),
    "JobState | None": lambda d, value: JobState(value) if value else None,
    "dict[str, Any]": lambda d, value: d._json(value),
    "dict[str, Any] | None": lambda d, value: d._json(value),
    "tuple[str, ...]": lambda d, value: tuple(d._json(value) or ()),
    "tuple[int, ...]": lambda d, value: tuple(int(n) for n in d._json(value) or ()),
    "tuple[str, ...] | None": lambda d, value: _tuple(d._json(value)),
}


@functools.cache
def _plan(record: type) -> tuple[tuple[str, Convert | None], ...]:
    return tuple((f.name, _CONVERT.get(str(f.type))) for f in dataclasses.fields(record))


# A job's columns in Job's field order, `damaged` left out (the decoder computes it), and the
# positions among them of those the decoder converts, by annotation or by name.
_JOB_FIELDS = dataclasses.fields(Job)
_COLUMNS = tuple(f.name for f in _JOB_FIELDS if f.name != "damaged")
_by_name = operator.itemgetter(*_COLUMNS)
_DAMAGED = [f.name for f in _JOB_FIELDS].index("damaged")


def _positions(*annotations: str) -> tuple[int, ...]:
    kinds = {f.name: str(f.type) for f in _JOB_FIELDS}
    return tuple(i for i, name in enumerate(_COLUMNS) if kinds[name] in annotations)


_TIMES = _positions("datetime", "datetime | None")
_REQUIRED_TIMES = _positions("datetime")
_OBJECTS = _positions("JSONObject", "JSONObject | None")
_METADATA = _COLUMNS.index("metadata")  # a JSONObject: NULL reads as {}
_STATE = _COLUMNS.index("state")
_DEAD_LETTERED = _COLUMNS.index("dead_lettered")
_EXECUTION_TIMEOUT = _COLUMNS.index("execution_timeout_s")
_PROGRESS = _COLUMNS.index("progress")
_STATES = {state.value: state for state in JobState}
_NOT_AN_OBJECT = object()  # what a JSON column that does not parse reads as, before damaged


def _damaged_names(positions: list[int]) -> tuple[str, ...]:
    """The damaged columns' names, in Job's field order."""
    return tuple(_COLUMNS[i] for i in sorted(positions))


@functools.cache
def _job_columns_at(columns: tuple[str, ...]) -> Callable[[Sequence[Any]], Sequence[Any]]:
    """For rows whose values are the columns `columns` in order: a function answering a row's
    values in _COLUMNS' order (a missing column raises here, not per row)."""
    missing = set(_COLUMNS) - set(columns)
    if missing:
        raise ValueError(f"a job row without {sorted(missing)}")
    return operator.itemgetter(*(columns.index(name) for name in _COLUMNS))


# How many clean times a RowDecoder keeps (emptied when full): a claim's few, a batch's few.
_CLEAN_TIMES_MAX = 1024


# `int | float` in an isinstance builds a union object per call; a tuple is built once.
_NUMBER = (int, float)


def _finite_or_none(value: Any) -> float | None:
    """A stored fraction, or None for a value that is no finite number (a hostile row)."""
    if value is None:  # nearly every row: no union type built, no isinstance asked
        return None
    if isinstance(value, _NUMBER) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None
