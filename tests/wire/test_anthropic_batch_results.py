"""A part's lines named in an Anthropic Message Batch: every request custom_id meets Anthropic's
pattern and names its line in its part only; results come back to the caller's custom_ids
each once, in order, whatever the file's order, with foreign, repeated and broken lines
ignored; a batch object's state and counts as OpenAI counts them."""

from __future__ import annotations

import random

import hypothesis
import orjson
import pytest
from hypothesis import strategies as st

from jobgate.domain.provider_batches import part_key
from jobgate.wire import anthropic_batch_results as ids
from jobgate.wire.openai_batches import RequestCounts

KEYS = st.text(min_size=1, max_size=300)
INDEXES = st.integers(min_value=0, max_value=999_999)


@hypothesis.given(key=KEYS, other=KEYS, index=INDEXES)
def test_a_request_custom_id_meets_the_pattern_and_names_its_line_in_its_part(
    key: str, other: str, index: int
) -> None:
    custom_id = ids.request_custom_id(key, index)
    assert ids.CUSTOM_ID.match(custom_id) and len(custom_id) <= ids.MAX_CUSTOM_ID_CHARS
    assert ids.line_index(key, custom_id) == index
    assert ids.carries(key, custom_id)
    hypothesis.assume(ids.part_tag(other) != ids.part_tag(key))
    assert ids.line_index(other, custom_id) is None


@hypothesis.given(key=KEYS, custom_id=st.text(max_size=80))
def test_a_custom_id_the_part_did_not_send_names_no_line(key: str, custom_id: str) -> None:
    index = ids.line_index(key, custom_id)
    assert index is None or custom_id == ids.request_custom_id(key, index)


def test_indexes_outside_a_part_are_refused() -> None:
    with pytest.raises(ValueError):
        ids.request_custom_id("k", -1)
    with pytest.raises(ValueError):
        ids.request_custom_id("k", 10**6)
    tag = ids.part_tag("k")
    for odd in (f"{tag}01", f"{tag}1234567", f"{tag}", f"{tag}-1", f"{tag.upper()}1"):
        assert ids.line_index("k", odd) is None


def line(custom_id: str, kind: str = "succeeded") -> bytes:
    return orjson.dumps({"custom_id": custom_id, "result": {"type": kind}})


@hypothesis.given(
    callers=st.lists(st.text(min_size=1, max_size=512), min_size=1, max_size=30, unique=True),
    seed=st.integers(min_value=0, max_value=2**32),
    missing=st.sets(st.integers(min_value=0, max_value=29), max_size=5),
)
def test_any_callers_custom_ids_come_back_each_once_in_order(
    callers: list[str], seed: int, missing: set[int]
) -> None:
    key = part_key("batch_1", "claude", 0)
    sent = [ids.request_custom_id(key, index) for index in range(len(callers))]
    kinds = ["succeeded", "errored", "canceled", "expired"]
    lines = [line(custom_id, kinds[i % 4]) for i, custom_id in enumerate(sent) if i not in missing]
    foreign = ids.request_custom_id(part_key("batch_1", "claude", 1), 0)
    lines += [
        line(foreign, "errored"),  # another part's
        line(ids.request_custom_id(key, len(callers))),  # a place outside the part
        b"{not json",
        b'{"custom_id": 7, "result": {"type": "succeeded"}}',
        b"",
    ]
    random.Random(seed).shuffle(lines)
    if 0 not in missing:
        lines.append(line(sent[0], "expired"))  # repeated, after the first: the first counts
    found = ids.results_by_line(key, len(callers), b"\n".join(lines))
    assert len(found) == len(callers)
    for index, result in enumerate(found):
        if index in missing:
            assert result is None
        else:
            assert result == {"type": kinds[index % 4]}
    back = {callers[i]: r for i, r in enumerate(found)}  # jobgate keeps the caller's ids
    assert list(back) == callers


def test_part_state_reads_the_counts_as_openai_counts_them() -> None:
    batch = {
        "processing_status": "ended",
        "request_counts": {
            "processing": 0, "succeeded": 5, "errored": 2, "canceled": 1, "expired": 3,
        },
    }  # fmt: skip
    state = ids.part_state(batch)
    assert state.ended and state.counts == RequestCounts(total=11, completed=5, failed=2)
    assert state.raw_counts["expired"] == 3 and ids.requests_total(batch) == 11
    running = ids.part_state({"processing_status": "in_progress", "request_counts": {
        "processing": 4, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0,
    }})  # fmt: skip
    assert not running.ended and running.counts == RequestCounts(total=4)
    odd = ids.part_state({"processing_status": "canceling", "request_counts": {"succeeded": -1}})
    assert odd.counts == RequestCounts()
    with pytest.raises(ValueError):
        ids.part_state({"processing_status": "done"})
