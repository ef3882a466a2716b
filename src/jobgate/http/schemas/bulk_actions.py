"""Request and response schemas of the bulk actions by filter (POST /v1/jobs/bulk_*).

Booleans are strict (`"dry_run": 0` is refused, not read as false) and integers take only
JSON numbers."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import annotated_types
import pydantic

from jobgate.domain.bulk import MAX_METADATA_KEYS, MAX_REASON_CHARS
from jobgate.domain.states import JobState
from jobgate.services.bulk_actions import MAX_JOBS_PER_CALL

_NO_NUL = r"^[^\x00]*$"  # PostgreSQL text cannot hold NUL
Name = Annotated[str, pydantic.StringConstraints(min_length=1, max_length=200, pattern=_NO_NUL)]
MetaKey = Annotated[str, pydantic.StringConstraints(min_length=1, max_length=64, pattern=_NO_NUL)]
MetaValue = Annotated[str, pydantic.StringConstraints(max_length=512, pattern=_NO_NUL)]


def _json_number(value: Any) -> Any:
    """An integer field takes a JSON number (21454.0 is an integer to JSON Schema), never a
    string or a boolean, which lax parsing would turn into one."""
    if isinstance(value, str | bool):
        raise ValueError("must be a JSON integer")
    return value


Integer = Annotated[int, pydantic.BeforeValidator(_json_number)]
# The bounds first: the validator then wraps a bounded integer, whose schema it shows.
UnixSeconds = Annotated[
    int, annotated_types.Interval(ge=0, le=2**33), pydantic.BeforeValidator(_json_number)
]


class JobFilterIn(pydantic.BaseModel):
    """Every criterion given must hold; an omitted one matches any job."""

    model_config = pydantic.ConfigDict(extra="forbid")

    tenant: Name | None = pydantic.Field(
        default=None,
        description="Tenant name. An operator key may name any tenant (or none: all of "
        "them); a tenant key acts on its own jobs only, and another name matches nothing.",
    )
    status: list[JobState] | None = pydantic.Field(default=None, max_length=6)
    provider: Name | None = None
    model: Name | None = None
    error_code: Name | None = pydantic.Field(default=None, description="The job's error.code")
    created_after: UnixSeconds | None = pydantic.Field(
        default=None, description="Unix seconds, inclusive"
    )
    created_before: UnixSeconds | None = pydantic.Field(
        default=None, description="Unix seconds, exclusive"
    )
    metadata: dict[MetaKey, MetaValue] | None = pydantic.Field(
        default=None,
        max_length=MAX_METADATA_KEYS,
        description="Pairs the job's metadata must hold (string values)",
    )
    dead_lettered: pydantic.StrictBool | None = None


class BulkActionRequest(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")

    where: JobFilterIn = pydantic.Field(default_factory=JobFilterIn)
    reason: str | None = pydantic.Field(
        default=None,
        max_length=MAX_REASON_CHARS,
        pattern=_NO_NUL,
        description="A note for the audit trail, written on each changed job's event",
    )
    dry_run: pydantic.StrictBool = pydantic.Field(
        default=False, description="Only count the jobs the action would change"
    )
    after: str | None = pydantic.Field(
        default=None,
        min_length=1,
        max_length=255,
        pattern=_NO_NUL,
        description="The previous answer's `last_id`, to continue",
    )
    limit: Integer = pydantic.Field(
        default=10_000,
        ge=1,
        le=MAX_JOBS_PER_CALL,
        description="At most this many jobs in this call (in transactions of a few hundred)",
    )


class BulkActionOut(pydantic.BaseModel):
    object: Literal["bulk_action"]
    action: Literal["cancel", "redrive", "delete"]
    dry_run: bool
    matched: int | None = pydantic.Field(description="Dry run: how many jobs would change")
    changed: int
    last_id: str | None
    has_more: bool
