"""The rules of shared rate limits (domain.rate_limits), property-tested: whatever the times at
which claims ask, the requests admitted in any window of T seconds are at most T * rpm / 60 + 1;
token estimates are never negative; schedules and keys out of range are refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobgate import errors
from jobgate.domain import ranges
from jobgate.domain import rate_limits as rules
from jobgate.domain.rate_limits import Bucket, BucketState


@given(
    rpm=st.integers(min_value=1, max_value=6000),
    gaps=st.lists(st.floats(min_value=0, max_value=5, allow_nan=False), max_size=300),
)
def test_admitted_requests_never_exceed_the_rate(rpm: int, gaps: list[float]) -> None:
    bucket = Bucket("p", rules.PROVIDER_WIDE, rpm=rpm)
    state = BucketState()
    now = 1_000.0
    starts = []
    for gap in gaps:
        now += gap
        if rules.admit([(bucket, state)], now) == 0.0:
            state = rules.take(bucket, state, now)
            starts.append(now)
    spacing = 60.0 / rpm
    for i, first in enumerate(starts):
        window = 10 * spacing  # any window: here ten spacings long
        inside = sum(1 for t in starts[i:] if t < first + window)
        assert inside <= 10 + 1


@given(
    tpm=st.integers(min_value=1, max_value=10**6),
    spends=st.lists(st.integers(min_value=0, max_value=10**5), min_size=1, max_size=50),
)
def test_token_debt_is_paid_at_the_tpm(tpm: int, spends: list[int]) -> None:
    bucket = Bucket("p", "m", tpm=tpm)
    state = BucketState()
    for tokens in spends:
        state = rules.spend(bucket, state, tokens, 0.0)
    assert state.tokens_at == pytest.approx(sum(spends) * 60.0 / tpm, rel=1e-9, abs=1e-9)


@given(st.dictionaries(st.sampled_from(["messages", "input", "max_tokens", "x"]), st.integers()))
def test_estimates_are_never_negative(body: dict[str, int]) -> None:
    assert rules.estimate_tokens(body) >= 0


@given(
    run_at=st.one_of(st.none(), st.floats(allow_nan=False)),
    delay_s=st.one_of(st.none(), st.floats(allow_nan=False)),
)
def test_schedules_are_in_range_or_refused(run_at: float | None, delay_s: float | None) -> None:
    try:
        ranges.check_schedule(run_at, delay_s)
    except errors.InvalidRequest as exc:
        assert exc.param in ("run_at", "delay_s")
        return
    assert run_at is None or delay_s is None
    assert run_at is None or 0 <= run_at <= ranges.RUN_AT_MAX
    assert delay_s is None or 0 <= delay_s <= ranges.MAX_DELAY_S
