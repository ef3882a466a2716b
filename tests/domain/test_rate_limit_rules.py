"""The rules of shared rate limits (domain.rate_limits), property-tested: whatever the times at
which claims ask, the requests admitted in any window of T seconds are at most T * rpm / 60 + 1;
token estimates are never negative; schedules and keys out of range are refused."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
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


# One worker's step, after a gap in provider spacings (whole ones: the edges of a window; or
# any): a worker that holds no request takes one for a target (0: the provider and model "m",
# 1: the provider alone); one that holds a request gives it back or else uses it.
_steps = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=2),  # the worker
        st.booleans(),  # it gives its request back (else uses it)
        st.integers(min_value=0, max_value=1),  # the target of a take
        st.one_of(st.sampled_from([0.0, 1.0, 2.0]), st.floats(0, 3, allow_nan=False)),
    ),
    max_size=120,
)
# rpm 600: one start every 0.1 s; three starts within one spacing when a request taken at 0.1 is
# given back after another was taken at 0.2.
_ISSUE = [(0, False, 1, 0.0), (0, False, 1, 0.0), (1, True, 1, 1.0), (2, False, 1, 1.0)]
_ISSUE += [(2, False, 1, 0.0), (1, True, 1, 0.0), (0, False, 1, 0.0), (0, False, 1, 0.0)]


def _bound_kept(starts: list[float], spacing: float) -> bool:
    """Whether `starts` keep the bound in every window: from any start, the k-th start after
    it comes k spacings later or more (at most k + 1 starts in a window k spacings long)."""
    times = sorted(starts)
    return all(
        times[i + k] - times[i] >= k * spacing * (1 - 1e-9)
        for i in range(len(times))
        for k in range(1, len(times) - i)
    )


@settings(max_examples=400)
@example(rpm=600, model_rpm=60, steps=_ISSUE)
@given(rpm=st.sampled_from([600, 60, 7]), model_rpm=st.sampled_from([60, 600]), steps=_steps)
def test_give_backs_never_admit_past_the_rate(
    rpm: int, model_rpm: int, steps: list[tuple[int, bool, int, float]]
) -> None:
    """Workers take requests, then use them or give them back, interleaved at any times (the
    store runs each take and give-back as one transaction of these rules): the requests used
    keep the bound in every window, for the provider and for its model."""
    wide = Bucket("p", rules.PROVIDER_WIDE, rpm=rpm)
    model = Bucket("p", "m", rpm=model_rpm)
    targets = [(wide, model), (wide,)]
    states = {wide: BucketState(), model: BucketState()}
    held: dict[int, tuple[tuple[Bucket, ...], float]] = {}  # by worker: its target, taken at
    used: dict[Bucket, list[float]] = {wide: [], model: []}
    now = 1_000.0
    for worker, gives_back, target, gap in steps:
        now += gap * 60.0 / rpm
        if worker not in held:
            buckets = targets[target]
            if rules.admit([(b, states[b]) for b in buckets], now) == 0.0:
                states.update({b: rules.take(b, states[b], now) for b in buckets})
                held[worker] = (buckets, now)
            continue
        buckets, taken_at = held.pop(worker)
        if gives_back:
            states.update({b: rules.give_back(b, states[b], taken_at) for b in buckets})
        else:
            for bucket in buckets:
                used[bucket].append(taken_at)
    for buckets, taken_at in held.values():  # still held: they may start
        for bucket in buckets:
            used[bucket].append(taken_at)
    assert _bound_kept(used[wide], 60.0 / rpm)
    assert _bound_kept(used[model], 60.0 / model_rpm)


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


@given(tpm=st.integers(min_value=1, max_value=10**10), tokens=st.integers(0, 10**20))
def test_one_job_never_owes_a_bucket_more_than_a_minute(tpm: int, tokens: int) -> None:
    bucket = Bucket("p", "m", tpm=tpm)
    state = rules.spend(bucket, BucketState(), rules.charge(bucket, tokens), 1_000.0)
    assert state.tokens_at <= 1_000.0 + 60.0 * (1 + 1e-12)
    assert rules.charge(bucket, tokens) == min(tokens, tpm)
    assert rules.charge(Bucket("p", "m"), tokens) == 0  # no tpm: nothing to owe


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


def test_the_earlier_turns_a_response_continues_count_in_its_estimate() -> None:
    alone = {"model": "m", "input": "next", "max_output_tokens": 10}
    turns = [{"type": "message", "role": "user", "content": "x" * 4000}]
    continued = {**alone, "jobgate_context": {"items": turns, "responses": ["resp_1"]}}
    assert rules.estimate_tokens(continued) >= rules.estimate_tokens(alone) + 1000
