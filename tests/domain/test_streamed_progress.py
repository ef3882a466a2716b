"""A streaming job's progress: tokens streamed so far as characters / 4, and their
fraction of the request's output cap, below 1 while it runs."""

from __future__ import annotations

from jobgate.domain import progress


def test_tokens_are_characters_over_four_rounded_up() -> None:
    assert progress.streamed(0, None) == (0, None)
    assert progress.streamed(9, None) == (3, None)


def test_the_fraction_is_of_the_output_cap_and_stays_below_one() -> None:
    assert progress.streamed(40, 20) == (10, 0.5)
    assert progress.streamed(4000, 20) == (1000, progress.STREAMING_CEILING)


def test_the_cap_is_read_from_whichever_name_the_api_uses() -> None:
    assert progress.output_cap({"max_tokens": 50}) == 50
    assert progress.output_cap({"max_completion_tokens": 7}) == 7
    assert progress.output_cap({"max_output_tokens": 9}) == 9
    assert progress.output_cap({"max_tokens": True}) is None
    assert progress.output_cap({"max_tokens": 0}) is None
    assert progress.output_cap(None) is None
