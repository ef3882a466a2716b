"""The job record and its event log entries, as the storage layer returns them."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

from jobgate.domain.states import JobState

JSONObject = dict[str, Any]
T = TypeVar("T")


def fast_init(cls: type[T]) -> type[T]:
    """Give a frozen, slotted dataclass an `__init__` that sets each slot through its
    descriptor, as `job_of_fields` below builds a Job: the frozen `__init__` dataclasses
    generates calls `object.__setattr__` per field (a Finish of 14 fields took ~3 us, a
    ProviderCall ~2; the worker builds several such records per job). Same signature, same
    defaults, same values (tests/domain/test_fast_init.py); a default_factory is called per
    instance as dataclasses calls it; no init=False field and no __post_init__ (checked here)."""
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    if hasattr(cls, "__post_init__") or not getattr(cls, "__slots__", None):
        raise TypeError(f"{cls.__name__}: fast_init needs slots and no __post_init__")
    namespace: dict[str, Any] = {"MISSING": _FACTORY_MISSING}
    params: list[str] = []
    lines: list[str] = []
    for field in fields:
        if not field.init:
            raise TypeError(f"{cls.__name__}.{field.name}: fast_init supports init fields only")
        value = field.name
        if field.default_factory is not dataclasses.MISSING:
            # As dataclasses does: a sentinel default, the factory called when it is seen.
            namespace[f"factory_{field.name}"] = field.default_factory
            params.append(f"{field.name}=MISSING")
            value = f"factory_{field.name}() if {field.name} is MISSING else {field.name}"
        elif field.default is dataclasses.MISSING:
            params.append(field.name)
        else:
            namespace[f"default_{field.name}"] = field.default
            params.append(f"{field.name}=default_{field.name}")
        namespace[f"set_{field.name}"] = getattr(cls, field.name).__set__
        lines.append(f"    set_{field.name}(self, {value})")
    source = f"def __init__(self, {', '.join(params)}):\n" + "\n".join(lines or ["    pass"])
    exec(source, namespace)
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    cls.__init__ = init  # type: ignore[method-assign]
    return cls


class _FactoryMissing:
    """fast_init's default for a field with a default_factory: the argument was not given."""

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY_MISSING = _FactoryMissing()


def record_builder(
    cls: type[T],
    params: Sequence[str],
    values: Mapping[str, str],
    namespace: Mapping[str, Any] | None = None,
) -> Callable[..., T]:
    """A function of `params` (by position) answering the frozen, slotted dataclass `cls` whose
    every field holds `values[field]`, a Python expression of the params and `namespace`:
    the record `cls(...)` would make of those values, without the frozen `__init__` and its
    `object.__setattr__` per field. The slots are filled on an instance of a mutable twin of
    `cls` (the same slots, so the same layout) with a plain attribute store each (specialised
    by the interpreter: ~10 ns), and the instance then becomes a `cls` by `__class__`
    assignment, which Python allows between classes of one layout. A Job of 45 fields: ~0.6
    us instead of ~3 through each slot's descriptor and ~9 through `__init__`
    (tests/domain/test_job_build.py holds every builder to `cls(...)`)."""
    names = [field.name for field in dataclasses.fields(cls)]  # type: ignore[arg-type]
    slots = getattr(cls, "__slots__", None)
    if hasattr(cls, "__post_init__") or slots is None or sorted(slots) != sorted(names):
        raise TypeError(f"{cls.__name__}: a record builder needs slots only, no __post_init__")
    if set(values) != set(names):
        raise TypeError(f"{cls.__name__}: a record builder needs a value for every field")
    if any(name.startswith("_") for name in [*names, *params]):  # the builder's own: _-named
        raise TypeError(f"{cls.__name__}: a record builder needs names without a leading _")
    twin = type(f"{cls.__name__}Building", (), {"__slots__": slots})
    lines = [f"def build({', '.join(params)}):", "    _made = _new(_Twin)"]
    lines += [f"    _made.{name} = {values[name]}" for name in names]
    lines += ["    _made.__class__ = _Cls", "    return _made"]
    scope: dict[str, Any] = {
        **(namespace or {}),
        "_new": object.__new__,
        "_Twin": twin,
        "_Cls": cls,
    }
    exec("\n".join(lines), scope)
    build: Callable[..., T] = scope["build"]
    build.__qualname__ = f"record_builder({cls.__qualname__})"
    return build


def slot_builder(cls: type[T], *given: str, **fixed: Any) -> Callable[..., T]:
    """`cls(...)` as a record_builder: a function taking the fields named in `given` (every
    field, in order, when none are named) by position; a field in `fixed` holds that value,
    any other its default (a default_factory called per record, as dataclasses does)."""
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    params = list(given) if given else [field.name for field in fields]
    values: dict[str, str] = {}
    namespace: dict[str, Any] = {}
    for field in fields:
        name = field.name
        if name in params:
            values[name] = name
        elif name in fixed:
            namespace[f"fixed_{name}"] = fixed[name]
            values[name] = f"fixed_{name}"
        elif field.default_factory is not dataclasses.MISSING:
            namespace[f"factory_{name}"] = field.default_factory
            values[name] = f"factory_{name}()"
        elif field.default is not dataclasses.MISSING:
            namespace[f"default_{name}"] = field.default
            values[name] = f"default_{name}"
        else:
            raise TypeError(f"{cls.__name__}.{name}: no value and no default")
    if not set(params) <= set(values) or not set(fixed) <= set(values):
        raise TypeError(f"{cls.__name__}: {sorted({*params, *fixed} - set(values))} unknown")
    return record_builder(cls, params, values, namespace)


class Phase:
    """Sub-state of a running job (a field, not a state)."""

    SUBMITTING = "submitting"
    AWAITING_PROVIDER = "awaiting_provider"


class CancelOutcome:
    """How a cancellation ended, recorded on the job."""

    NOT_STARTED = "not_started"  # cancelled while queued: the provider never saw it
    INTERRUPTED = "interrupted"  # the worker aborted its in-flight call
    AT_PROVIDER = "at_provider"  # the provider confirmed the cancellation
    TOO_LATE = "too_late"  # the provider had already finished; the job keeps its result
    NOT_SUPPORTED = "not_supported"  # cancelled locally; the provider's answer will be discarded


@dataclasses.dataclass(frozen=True, slots=True)
class Job:
    id: str
    tenant_id: str
    state: JobState
    api: str
    provider: str
    endpoint: str
    model: str | None
    request: JSONObject | None
    metadata: JSONObject
    webhook: JSONObject | None
    result: JSONObject | None
    error: JSONObject | None
    usage: JSONObject | None
    priority: int
    attempt: int
    max_attempts: int
    run_count: int
    lost_count: int
    run_at: datetime
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    completed_at: datetime | None
    cancel_requested_at: datetime | None
    expires_at: datetime | None
    execution_timeout_s: float | None
    deadline_at: datetime | None
    lease_owner: str | None
    lease_token: str | None
    lease_expires_at: datetime | None
    phase: str | None
    provider_job_id: str | None
    creation_outcome: str | None
    cancel_outcome: str | None
    reconcile_at: datetime | None
    dead_lettered: bool
    purged_at: datetime | None
    event_seq: int
    # How many provider jobs of this job ended and were followed by a new attempt.
    provider_generation: int = 0
    # Columns whose stored value could not be read as what they should hold (a row written by
    # hand or before the edge checked it): the worker fails such a job as `poison_job`.
    damaged: tuple[str, ...] = ()
    concurrency_key: str | None = None
    model_route: str | None = None  # the route alias the job was submitted for
    reconciled_at: datetime | None = None  # when a reconciler last asked its provider
    progress: float | None = None  # the fraction done its provider last reported
    # The provider's `x-request-id` / `request-id` of the attempt that succeeded (a failed
    # attempt's is in error.request_id).
    provider_request_id: str | None = None

    @property
    def terminal(self) -> bool:
        return self.state.terminal

    @property
    def provider_idempotency_key(self) -> str:
        """The Idempotency-Key of this attempt's create: the job id, the same on every re-send
        of one provider job (so a provider that deduplicates answers with the original), and
        suffixed by the generation once a provider job of this job has ended and a new one is
        wanted (else that provider would answer the new attempt with the ended job)."""
        if self.provider_generation == 0:
            return self.id
        return f"{self.id}:{self.provider_generation}"


# Job(*values), one value per field in order, built without Job's __init__ (slot_builder): how
# the hot paths build jobs (NewJob.queued, storage.rows.RowDecoder.job).
job_of_fields = slot_builder(Job)


@fast_init  # built once per submitted job
@dataclasses.dataclass(frozen=True, slots=True)
class NewJob:
    """What a submit stores; the storage adds state, times and counters."""

    id: str
    tenant_id: str
    provider: str
    endpoint: str
    model: str | None
    request: JSONObject
    metadata: JSONObject
    webhook: JSONObject | None = None
    api: str = "jobs"
    priority: int = 5
    max_attempts: int = 3
    start_timeout_s: float | None = None
    execution_timeout_s: float | None = None
    # Scheduling: not claimable before `run_at` (absolute) or `delay_s` after the insert, by
    # the database's clock; a time in the past means now. The start deadline counts from then.
    run_at: datetime | None = None
    delay_s: float = 0.0
    concurrency_key: str | None = None  # held by the tenant's limits per key
    model_route: str | None = None  # the `[routes."ALIAS"]` submitted for, if any

    def queued(
        self,
        *,
        created_at: datetime,
        run_at: datetime,
        expires_at: datetime | None,
        damaged: tuple[str, ...] = (),
    ) -> Job:
        """This job as its insert at `created_at` stored it (queued, its first event written,
        never run), given the times the database computed: what `job_get` then reads, built
        without reading the row back. The JSON values are this job's own objects."""
        return _queued_job(self, created_at, run_at, expires_at, damaged)


# NewJob.queued's Job, field by field: an expression of the NewJob `new` and the times its
# insert computed. One function fills the Job from them (record_builder), where passing 45
# values to job_of_fields cost as much again as building it (~1 us per job answered).
_queued_job = record_builder(
    Job,
    ("new", "created_at", "run_at", "expires_at", "damaged"),
    {
        "id": "new.id",
        "tenant_id": "new.tenant_id",
        "state": "QUEUED",
        "api": "new.api",
        "provider": "new.provider",
        "endpoint": "new.endpoint",
        "model": "new.model",
        "request": "new.request",
        "metadata": "new.metadata",
        "webhook": "new.webhook",
        "result": "None",
        "error": "None",
        "usage": "None",
        "priority": "new.priority",
        "attempt": "0",
        "max_attempts": "new.max_attempts",
        "run_count": "0",
        "lost_count": "0",
        "run_at": "run_at",
        "created_at": "created_at",
        "updated_at": "created_at",
        "started_at": "None",
        "completed_at": "None",
        "cancel_requested_at": "None",
        "expires_at": "expires_at",
        "execution_timeout_s": "new.execution_timeout_s",
        "deadline_at": "None",
        "lease_owner": "None",
        "lease_token": "None",
        "lease_expires_at": "None",
        "phase": "None",
        "provider_job_id": "None",
        "creation_outcome": "None",
        "cancel_outcome": "None",
        "reconcile_at": "None",
        "dead_lettered": "False",
        "purged_at": "None",
        "event_seq": "1",
        "provider_generation": "0",
        "damaged": "damaged",
        "concurrency_key": "new.concurrency_key",
        "model_route": "new.model_route",
        "reconciled_at": "None",
        "progress": "None",
        "provider_request_id": "None",
    },
    {"QUEUED": JobState.QUEUED},
)


# NewJob(*values), every field by position in order (slot_builder): how JobService.prepare
# builds the one NewJob of each submitted job.
new_job_of = slot_builder(NewJob)


@dataclasses.dataclass(frozen=True, slots=True)
class JobEvent:
    job_id: str
    seq: int
    from_state: JobState | None
    to_state: JobState
    actor: str
    reason: str | None
    applied: bool
    created_at: datetime


@fast_init
@dataclasses.dataclass(frozen=True, slots=True)
class Lease:
    """Proof that a worker holds a running job; every write it makes is fenced on the token."""

    job_id: str
    token: str
