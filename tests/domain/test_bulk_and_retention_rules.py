"""Pure rules: the retention horizon and the bulk audit reason."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobgate import errors
from jobgate.domain.bulk import MAX_REASON_CHARS, BulkAction, audit_reason
from jobgate.domain.retention import horizon


def test_the_horizon_is_the_retention_period_alone() -> None:
    """Keys are checked by their own expiry at `now`, and usage never holds a job back: the
    retention period is the only cut."""
    now = datetime.fromisoformat("2026-12-01T14:30:00+00:00")
    cut = horizon(now, retention_s=600)
    assert cut.completed_before == now - timedelta(seconds=600)
    assert cut.now == now


def test_audit_reason() -> None:
    assert audit_reason(BulkAction.REDRIVE, None) == "bulk_redrive"
    assert audit_reason(BulkAction.CANCEL, "  ") == "bulk_cancel"
    assert audit_reason(BulkAction.DELETE, "outage\n42") == "bulk_delete: outage 42"
    with pytest.raises(errors.InvalidRequest):
        audit_reason(BulkAction.CANCEL, "x" * (MAX_REASON_CHARS + 1))


@given(st.text(max_size=MAX_REASON_CHARS))
def test_audit_reason_is_always_printable_and_bounded(note: str) -> None:
    reason = audit_reason(BulkAction.CANCEL, note)
    assert reason.isprintable()
    assert reason.startswith("bulk_cancel")
    assert len(reason) <= len("bulk_cancel: ") + MAX_REASON_CHARS
