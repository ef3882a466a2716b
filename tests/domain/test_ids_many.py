"""Ids minted together (IdGenerator.new_many): the same layout as one at a time, one clock
read and one draw of randomness for a whole batch."""

from __future__ import annotations

import re
import secrets

import pytest

from jobgate import ids
from jobgate.testing import FakeClock, SequentialIds


def test_new_many_lays_out_each_id_as_new_does(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    draw = bytes(range(256))[:50]  # 5 ids' worth: 10 bytes each
    draws: list[int] = []

    def token_bytes(n: int) -> bytes:
        draws.append(n)
        return draw[:n]

    monkeypatch.setattr(secrets, "token_bytes", token_bytes)
    minted = ids.RandomIds(clock).new_many("job", 5)
    assert draws == [50]  # one read of the OS's randomness for the batch
    millis = int(clock.now().timestamp() * 1000)
    expected = [
        "job_" + ids._body(millis, int.from_bytes(draw[at : at + 10], "big"))
        for at in range(0, 50, 10)
    ]
    assert minted == sorted(expected)  # ascending: a batch's rows reach the index in order


def test_new_many_ids_are_distinct_and_sort_with_new_ones_by_time() -> None:
    clock = FakeClock()
    generator = ids.RandomIds(clock)
    before = generator.new("job")
    clock.advance(0.002)
    batch = generator.new_many("job", 1000)
    clock.advance(0.002)
    after = generator.new("job")
    assert all(re.fullmatch(r"job_[0-9a-hjkmnp-tv-z]{26}", i) for i in batch)
    assert len(set(batch)) == 1000
    assert all(before < i < after for i in batch)
    assert batch == sorted(batch)
    assert generator.new_many("resp", 0) == []
    assert generator.new_many("resp", 1)[0].startswith("resp_")


def test_sequential_ids_mint_many_in_sequence() -> None:
    generator = SequentialIds()
    assert generator.new("job") == "job_000001"
    assert generator.new_many("job", 2) == ["job_000002", "job_000003"]
    assert generator.new("job") == "job_000004"


def test_random_digits_match_the_body_layout_at_every_bit() -> None:
    """_random_digits (new_many's) makes the last 16 digits _body makes of the same bits:
    the extremes, each single bit, and random draws."""
    draws = [
        0,
        2**80 - 1,
        *(1 << bit for bit in range(80)),
        *(secrets.randbits(80) for _ in range(200)),
    ]
    for random80 in draws:
        assert ids._random_digits(random80) == ids._body(0, random80)[10:]
