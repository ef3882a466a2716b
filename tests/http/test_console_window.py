"""The charts' window: the hour is read in full once a minute; polls in between
read only since the last settled minute, and together they give the same transitions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from jobgate.domain.rollups import Transition
from jobgate.domain.states import JobState
from jobgate.services import console_window

NOW = datetime(2026, 1, 1, 12, 30, 30, tzinfo=UTC)


def succeeded(job: str, at: datetime) -> Transition:
    return Transition(
        job_id=job,
        tenant_id="ten_a",
        provider="sim",
        from_state=JobState.RUNNING,
        to_state=JobState.SUCCEEDED,
        reason=None,
        at=at,
        queued_at=None,
        run_at=at,
    )


class Reader:
    def __init__(self, rows: list[Transition]) -> None:
        self.rows = rows
        self.reads: list[datetime] = []

    async def console_transitions(self, *, since: datetime, limit: int) -> list[Transition]:
        self.reads.append(since)
        found = sorted((r for r in self.rows if r.at >= since), key=lambda r: r.at, reverse=True)
        return found[:limit]


async def test_polls_within_a_minute_read_only_the_unsettled_tail() -> None:
    rows = [succeeded(f"j{i}", NOW - timedelta(seconds=50 * i)) for i in range(80)]
    reader = Reader(rows)
    first, capped = await console_window.last_hour(reader, now=NOW)
    assert not capped and len(reader.reads) == 2  # the hour, then the tail
    assert reader.reads[0] == NOW - timedelta(seconds=3660)
    assert reader.reads[1] == datetime(2026, 1, 1, 12, 30, tzinfo=UTC)
    assert [r.job_id for r in first] == [r.job_id for r in rows if r.at >= reader.reads[0]]

    reader.rows.append(succeeded("new", NOW + timedelta(seconds=5)))
    later, _ = await console_window.last_hour(reader, now=NOW + timedelta(seconds=6))
    assert len(reader.reads) == 3 and reader.reads[2] == reader.reads[1]  # only the tail
    assert later[0].job_id == "new" and len(later) == len(first) + 1

    await console_window.last_hour(reader, now=NOW + timedelta(seconds=45))  # 12:31:15
    assert len(reader.reads) == 5  # a minute settled: the hour again, then the tail


async def test_a_capped_read_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(console_window, "MAX_TRANSITIONS", 3)
    reader = Reader([succeeded(f"j{i}", NOW - timedelta(seconds=i)) for i in range(5)])
    rows, capped = await console_window.last_hour(reader, now=NOW)
    assert capped and len(rows) <= 6
