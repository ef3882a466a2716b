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
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from jobgate.domain.job import Job, JobEvent
from jobgate.domain.states import JobState
from jobgate.storage.records import (
    ENDPOINT_ACTIVE,
    ENDPOINT_DISABLED,
    ENDPOINT_MISSING,
    ApiKey,
    BatchCounts,
    BatchItemResult,
    BatchRecord,
    Delivery,
    DeliveryAttempt,
    FileChunk,
    FileRecord,
    OutboxEntry,
    Schedule,
    Tenant,
    UsageEntry,
    WebhookEndpoint,
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


def from_columns(record: Callable[..., R], row: RowLike, /, **decoded: Any) -> R:
    """A `record` (a dataclass) whose fields are read from the row's columns of the same names,
    as stored; `decoded` holds the fields that need converting (times, JSON, flags)."""
    plain = {name: row[name] for name in _field_names(record) if name not in decoded}
    return record(**plain, **decoded)


@functools.cache
def _field_names(record: Any) -> tuple[str, ...]:
    return tuple(field.name for field in dataclasses.fields(record))


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

    def job(self, row: RowLike) -> Job:
        r = _Reading(row, self)
        t = r.time
        j = r.json
        execution_timeout_s = row["execution_timeout_s"]
        if execution_timeout_s is not None and not (
            isinstance(execution_timeout_s, int | float) and math.isfinite(execution_timeout_s)
        ):
            r.damaged.append("execution_timeout_s")
            execution_timeout_s = None
        return Job(
            id=row["id"],
            tenant_id=row["tenant_id"],
            state=JobState(row["state"]),
            api=row["api"],
            provider=row["provider"],
            endpoint=row["endpoint"],
            model=row["model"],
            request=j("request"),
            metadata=j("metadata") or {},
            webhook=j("webhook"),
            result=j("result"),
            error=j("error"),
            usage=j("usage"),
            priority=row["priority"],
            attempt=row["attempt"],
            max_attempts=row["max_attempts"],
            run_count=row["run_count"],
            lost_count=row["lost_count"],
            run_at=r.required_time("run_at"),
            created_at=r.required_time("created_at"),
            updated_at=r.required_time("updated_at"),
            started_at=t("started_at"),
            completed_at=t("completed_at"),
            cancel_requested_at=t("cancel_requested_at"),
            expires_at=t("expires_at"),
            execution_timeout_s=execution_timeout_s,
            deadline_at=t("deadline_at"),
            lease_owner=row["lease_owner"],
            lease_token=row["lease_token"],
            lease_expires_at=t("lease_expires_at"),
            phase=row["phase"],
            provider_job_id=row["provider_job_id"],
            creation_outcome=row["creation_outcome"],
            cancel_outcome=row["cancel_outcome"],
            reconcile_at=t("reconcile_at"),
            dead_lettered=bool(row["dead_lettered"]),
            purged_at=t("purged_at"),
            event_seq=row["event_seq"],
            provider_generation=row["provider_generation"],
            damaged=tuple(r.damaged),
            concurrency_key=row["concurrency_key"],
            model_route=row["model_route"],
            reconciled_at=t("reconciled_at"),
            progress=_finite_or_none(row["progress"]),
            provider_request_id=row["provider_request_id"],
        )

    def _times(
        self, row: RowLike, *required: str, optional: tuple[str, ...] = ()
    ) -> dict[str, Any]:
        """The named time columns decoded: `required` ones raise ValueError when NULL."""
        times = {name: self._time(row[name]) for name in (*required, *optional)}
        if any(times[name] is None for name in required):
            raise ValueError("a required time column is NULL")
        return times

    def schedule(self, row: RowLike) -> Schedule:
        return from_columns(
            Schedule,
            row,
            template=self._json(row["template"]),
            paused=bool(row["paused"]),
            **self._times(row, "next_run_at", "created_at"),
        )

    def event(self, row: RowLike) -> JobEvent:
        return from_columns(
            JobEvent,
            row,
            from_state=JobState(row["from_state"]) if row["from_state"] else None,
            to_state=JobState(row["to_state"]),
            applied=bool(row["applied"]),
            **self._times(row, "created_at"),
        )

    def tenant(self, row: RowLike) -> Tenant:
        return from_columns(Tenant, row, **self._times(row, "created_at"))

    def api_key(self, row: RowLike) -> ApiKey:
        return from_columns(ApiKey, row, **self._times(row, "created_at", optional=("revoked_at",)))

    def usage(self, row: RowLike) -> UsageEntry:
        return from_columns(UsageEntry, row, **self._times(row, "created_at"))

    def outbox(self, row: RowLike) -> OutboxEntry:
        times = self._times(row, "created_at", "next_attempt_at", optional=("completed_at",))
        return from_columns(OutboxEntry, row, **times)

    # -- webhooks ------------------------------------------------------------------------
    def endpoint(self, row: RowLike) -> WebhookEndpoint:
        return from_columns(
            WebhookEndpoint,
            row,
            event_types=tuple(self._json(row["event_types"]) or ()),
            include_result=bool(row["include_result"]),
            disabled=bool(row["disabled"]),
            **self._times(
                row, "created_at", "updated_at", optional=("previous_secret_expires_at",)
            ),
        )

    def delivery(self, row: RowLike) -> Delivery:
        """A claimed outbox row joined with its endpoint (e_*) and tenant (tenant_secret)."""
        entry = self.outbox(row)
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

    def attempt(self, row: RowLike) -> DeliveryAttempt:
        succeeded = bool(row["succeeded"])
        times = self._times(row, "created_at")
        return from_columns(DeliveryAttempt, row, succeeded=succeeded, **times)

    # -- files and batches ---------------------------------------------------------------
    def file(self, row: RowLike) -> FileRecord:
        sizes = {"bytes": int(row["bytes"]), "lines": int(row["lines"])}
        return from_columns(FileRecord, row, **sizes, **self._times(row, "created_at"))

    @staticmethod
    def chunk(row: RowLike) -> FileChunk:
        return from_columns(FileChunk, row, data=bytes(row["data"]))

    def batch(self, row: RowLike) -> BatchRecord:
        stamps = [name for name in _field_names(BatchRecord) if name.endswith("_at")]
        times = {name: self._time(row[name]) for name in stamps}
        blobs = {name: self._json(row[name]) for name in ("metadata", "errors")}
        return from_columns(BatchRecord, row, **blobs, **times)

    def item(self, row: RowLike) -> BatchItemResult:
        blobs = {name: self._json(row[name]) for name in ("item_error", "result", "error")}
        return from_columns(BatchItemResult, row, **blobs)

    @staticmethod
    def counts(row: RowLike) -> BatchCounts:
        return BatchCounts(**{name: int(row[name]) for name in _field_names(BatchCounts)})


def _finite_or_none(value: Any) -> float | None:
    """A stored fraction, or None for a value that is no finite number (a hostile row)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None
