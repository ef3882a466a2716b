"""Bulk actions on jobs chosen by a filter (cancel, redrive, delete): which jobs each action
applies to, and the audit reason each changed job's event carries. Pure: no I/O."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from datetime import datetime

from jobgate import errors
from jobgate.domain.states import JobState

MAX_REASON_CHARS = 200
MAX_METADATA_KEYS = 16


class BulkAction(enum.StrEnum):
    # queued -> cancelled at once; running -> cancel requested (its worker confirms), exactly
    # as a single POST /v1/jobs/{id}/cancel. Terminal jobs are left alone.
    CANCEL = "cancel"
    # A dead-lettered failed job -> queued with a fresh attempt series, as POST
    # /v1/jobs/{id}/retry. A purged job is refused: its request is gone, so it cannot run.
    REDRIVE = "redrive"
    # As DELETE /v1/jobs/{id}: cancel if live, then erase input and result (the tombstone
    # stays until retention deletes the row).
    DELETE = "delete"


@dataclasses.dataclass(frozen=True, slots=True)
class JobFilter:
    """Which jobs a bulk action considers. Every given criterion must hold (AND); None means
    any. `tenant_id` is forced to the caller's own tenant for a tenant key."""

    tenant_id: str | None = None
    states: tuple[JobState, ...] | None = None
    provider: str | None = None
    model: str | None = None
    error_code: str | None = None
    created_after: datetime | None = None  # inclusive
    created_before: datetime | None = None  # exclusive (an empty range matches nothing)
    metadata: Mapping[str, str] | None = None  # every pair must be in the job's metadata
    dead_lettered: bool | None = None

    def __post_init__(self) -> None:
        if self.metadata is not None and len(self.metadata) > MAX_METADATA_KEYS:
            raise errors.InvalidRequest(
                f"at most {MAX_METADATA_KEYS} metadata pairs", param="where.metadata"
            )


def audit_reason(action: BulkAction, note: str | None) -> str:
    """The reason written on each changed job's event: `bulk_<action>`, and the operator's
    note after a colon. The note is bounded, and made printable (it is shown in logs and
    pages): a control character becomes a space."""
    reason = f"bulk_{action}"
    if note is None:
        return reason
    if len(note) > MAX_REASON_CHARS:
        raise errors.InvalidRequest(
            f"reason must be at most {MAX_REASON_CHARS} characters", param="reason"
        )
    note = "".join(c if c.isprintable() else " " for c in note).strip()
    return f"{reason}: {note}" if note else reason
