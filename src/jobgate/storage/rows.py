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
from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime
from typing import Any, Protocol, TypeVar, cast

from jobgate.domain.job import Job, job_of_fields
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


class _Reading:
    """One row being decoded: each column read through a guard that records the damage."""

    def __init__(self, row: RowLike, decoder: RowDecoder) -> None:
        self.row = row
        self.decoder = decoder
        self.damaged: list[str] = []

    def time(self, column: str) -> datetime | None:
        raw = self.row[column]
        if raw is None:  # most optional times of a job (no decoder call for them)
            return None
        try:
            moment = self.decoder._time(raw)
        except (ValueError, OverflowError, OSError, TypeError):
            self.damaged.append(column)
            return None
        if moment is None:
            return None
        if moment.tzinfo is not None and EARLIEST < moment < LATEST:
            return moment  # already inside the bounds (what nearly every row holds)
        clamped = clamp_time(moment)
        if clamped in (LATEST, EARLIEST):
            self.damaged.append(column)
        return clamped

    def required_time(self, column: str) -> datetime:
        moment = self.time(column)
        if moment is None:
            if column not in self.damaged:
                self.damaged.append(column)
            return EARLIEST
        return moment

    def finite(self, column: str) -> float | None:
        value = self.row[column]
        if value is None or (isinstance(value, int | float) and math.isfinite(value)):
            return value
        self.damaged.append(column)
        return None

    def json(self, column: str, *, kind: type = dict) -> Any:
        raw = self.row[column]
        if raw is None:
            return None
        try:
            value = self.decoder._json(raw)
        except (ValueError, TypeError):
            self.damaged.append(column)
            return None
        if value is not None and not isinstance(value, kind):
            self.damaged.append(column)
            return None
        return value


class RowDecoder:
    """Every record storage reads, decoded from a row by one dialect's time and JSON codec."""

    def __init__(self, *, time: TimeDecoder, json: JsonDecoder) -> None:
        self._time = time
        self._json = json
        # Stored times -> the times the fast decoder decoded from them and found clean: the
        # jobs of one claim share their claim's times, those of one submit batch theirs, so
        # most of a claimed job's times are one lookup (no codec call, no bounds check).
        self._clean_times: dict[Any, datetime] = {}

    def job(self, row: RowLike) -> Job:
        """A job, each damaged column clamped or emptied and named in `damaged` (never raises
        for a stored value)."""
        try:
            return _job_fast()(row, self._time, self._json, self._clean_times)
        except Exception:  # a column to clamp or empty, or a value the guard must judge
            return self._job_guarded(row)

    def jobs_at(self, rows: Sequence[Sequence[Any]], columns: tuple[str, ...]) -> list[Job]:
        """`job` for each row fetched as a plain tuple whose column names are `columns`
        (SQLite's claim: the writer thread then builds no dict of ~45 entries per claimed
        job). The same answers as `job` on the rows as mappings, damaged rows included."""
        if not rows:
            return []
        fast, time_, json_ = _job_fast_at(columns), self._time, self._json
        clean = self._clean_times
        jobs: list[Job] = []
        for row in rows:
            try:
                jobs.append(fast(row, time_, json_, clean))
            except Exception:  # as in `job`: the guard judges the row
                jobs.append(self._job_guarded(dict(zip(columns, row, strict=True))))
        return jobs

    def _job_guarded(self, row: RowLike) -> Job:
        """`job`, each column read through the damage guard (`_Reading`)."""
        r = _Reading(row, self)
        values = [row[name] if read is None else read(r, name) for name, read in _job_plan()]
        values[_DAMAGED] = tuple(r.damaged)  # last: every column has been read
        return job_of_fields(*values)

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


Read = Callable[[_Reading, str], Any]
# A job's columns that need reading through the damage guard, by annotation or by name.
_JOB_READ: dict[str, Read] = {
    "datetime": _Reading.required_time,
    "datetime | None": _Reading.time,
    "JSONObject | None": _Reading.json,
    "JSONObject": lambda r, column: r.json(column) or {},
    "JobState": lambda r, column: JobState(r.row[column]),
    "bool": lambda r, column: bool(r.row[column]),
    "execution_timeout_s": _Reading.finite,
    "progress": lambda r, column: _finite_or_none(r.row[column]),
    "damaged": lambda r, column: (),  # a placeholder: set once every column has been read
}


_DAMAGED = [f.name for f in dataclasses.fields(Job)].index("damaged")


@functools.cache
def _job_plan() -> tuple[tuple[str, Read | None], ...]:
    """Each field of a job in order, with how its column is read (None: as stored)."""
    fields = dataclasses.fields(Job)
    return tuple((f.name, _JOB_READ.get(f.name) or _JOB_READ.get(str(f.type))) for f in fields)


class _Damaged(Exception):
    """The fast decoder met a value the guarded one clamps, empties or refuses."""


# How many clean times a RowDecoder keeps (emptied when full): a claim's few, a batch's few.
_CLEAN_TIMES_MAX = 1024

# The generated decoders: (row, time decoder, JSON decoder, clean times) -> Job.
FastDecoder = Callable[[Any, TimeDecoder, JsonDecoder, dict[Any, datetime]], Job]


@functools.cache
def _job_fast() -> FastDecoder:
    """`_job_decoder` reading each column by its name."""
    return _job_decoder(lambda name: f"row[{name!r}]")


@functools.cache
def _job_fast_at(columns: tuple[str, ...]) -> FastDecoder:
    """`_job_decoder` for rows whose values are the columns `columns`, in order (every field
    of a Job but `damaged` must be there; a missing one raises here, not per row): the row is
    unpacked in one step instead of indexed per column."""
    missing = {f.name for f in dataclasses.fields(Job)} - {"damaged", *columns}
    if missing:
        raise ValueError(f"a job row without {sorted(missing)}")
    fields = {f.name for f in dataclasses.fields(Job)}
    targets = [name if name in fields else f"_unused{i}" for i, name in enumerate(columns)]
    return _job_decoder(lambda name: name, unpack=f"    ({', '.join(targets)},) = row")


def _job_decoder(column: Callable[[str], str], *, unpack: str | None = None) -> FastDecoder:
    """A job decoder for rows that hold nothing damaged (nearly all), generated from `Job`'s
    fields: each column read inline, without `_Reading`'s call per column. It raises for any
    value `_Reading` would record as damaged (or refuse), and `RowDecoder.job` then decodes the
    row through the guard: the answers are the same by construction
    (tests/storage/test_row_decoder_fast.py holds them equal)."""
    lines = ["def decode(row, time_, json_, clean):"]
    if unpack is not None:
        lines.append(unpack)
    names: list[str] = []
    for field in dataclasses.fields(Job):
        name, kind = field.name, str(field.type)
        names.append(name)
        if name == "damaged":
            lines.append("    damaged = ()")
            continue
        get = column(name)
        if name == "execution_timeout_s":
            lines += [
                f"    {name} = {get}",
                f"    if {name} is not None and not (",
                f"        isinstance({name}, NUMBER) and isfinite({name})",
                "    ):",
                "        raise Damaged",
            ]
        elif name == "progress":
            lines.append(f"    {name} = finite_or_none({get})")
        elif kind in ("datetime", "datetime | None"):
            # A stored time this decoder found clean before is looked up; another one is
            # decoded and checked, and remembered once clean (time_ answers the same time for
            # equal stored values: a pure function of the value).
            lines += [f"    {name} = {get}", f"    if {name} is not None:"]
            lines += [
                f"        moment = clean.get({name})",
                "        if moment is None:",
                f"            moment = time_({name})",
                "            if moment is not None:",
                "                if moment.tzinfo is None or not EARLIEST < moment < LATEST:",
                "                    raise Damaged",
                "                if len(clean) >= CLEAN_TIMES_MAX:",
                "                    clean.clear()",
                f"                clean[{name}] = moment",
                f"        {name} = moment",
            ]
            if kind == "datetime":
                lines += [f"    if {name} is None:", "        raise Damaged"]
        elif kind in ("JSONObject | None", "JSONObject"):
            lines += [f"    {name} = {get}", f"    if {name} is not None:"]
            lines += [
                f"        {name} = json_({name})",
                f"        if {name} is not None and not isinstance({name}, dict):",
                "            raise Damaged",
            ]
            if kind == "JSONObject":
                lines.append(f"    {name} = {name} or {{}}")
        elif kind == "JobState":  # a lookup; an unknown value raises as JobState(value) does
            lines.append(f"    {name} = STATES.get({get}) or JobState({get})")
        elif kind == "bool":
            lines.append(f"    {name} = bool({get})")
        else:
            lines.append(f"    {name} = {get}")
    lines.append(f"    return build({', '.join(names)})")
    namespace: dict[str, Any] = {
        "Damaged": _Damaged,
        "isfinite": math.isfinite,
        "finite_or_none": _finite_or_none,
        "NUMBER": _NUMBER,
        "EARLIEST": EARLIEST,
        "LATEST": LATEST,
        "JobState": JobState,
        "STATES": {state.value: state for state in JobState},
        "CLEAN_TIMES_MAX": _CLEAN_TIMES_MAX,
        "build": job_of_fields,
    }
    exec("\n".join(lines), namespace)
    decode: FastDecoder = namespace["decode"]
    return decode


# `int | float` in an isinstance builds a union object per call; a tuple is built once.
_NUMBER = (int, float)


def _finite_or_none(value: Any) -> float | None:
    """A stored fraction, or None for a value that is no finite number (a hostile row)."""
    if value is None:  # nearly every row: no union type built, no isinstance asked
        return None
    if isinstance(value, _NUMBER) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None
