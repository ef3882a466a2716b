"""Object ids: the fast encoding writes exactly the digits of the ULID layout."""

from __future__ import annotations

import random
import re

from jobgate import ids
from jobgate.testing import FakeClock


def _digits(value: int, length: int) -> str:
    """The reference: `length` Crockford base32 digits of `value`, most significant first."""
    out = []
    for _ in range(length):
        value, digit = divmod(value, 32)
        out.append(ids._ALPHABET[digit])
    return "".join(reversed(out))


def test_body_matches_the_digit_by_digit_encoding() -> None:
    rng = random.Random(15)
    cases = [(0, 0), (2**48 - 1, 2**80 - 1), (2**50 - 1, 1), (1_764_620_000_000, 2**79)]
    cases += [(rng.getrandbits(48), rng.getrandbits(80)) for _ in range(2000)]
    for millis, bits in cases:
        assert ids._body(millis, bits) == _digits(millis, 10) + _digits(bits, 16)


def test_new_ids_are_prefixed_time_ordered_and_distinct() -> None:
    clock = FakeClock()
    generator = ids.RandomIds(clock)
    first = generator.new("job")
    clock.advance(0.002)
    later = [generator.new("job") for _ in range(1000)]
    assert re.fullmatch(r"job_[0-9a-hjkmnp-tv-z]{26}", first)
    assert all(first < other for other in later)
    assert len(set(later)) == len(later)
    millis = int(clock.now().timestamp() * 1000)
    assert later[0][4:14] == _digits(millis, 10)
