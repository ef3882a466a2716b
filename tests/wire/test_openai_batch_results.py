"""An OpenAI provider batch read back into its part: state and counts, and every line of the
part once, in order, from the output file, the error file, or an error line when the batch
ended before it ran. Inputs come from the simulator's Batch API (pure, on a fake clock)."""

from __future__ import annotations

import hypothesis
import orjson
import pytest
from hypothesis import strategies as st

from jobgate.simulator.openai_batches import OpenAIBatches
from jobgate.wire import openai_batch_results as results
from jobgate.wire import sim
from jobgate.wire.openai_batches import RequestCounts

CHAT = "/v1/chat/completions"


class _Clock:
    def __init__(self) -> None:
        self.now = 1_000.0


def _line(custom_id: str, **sim: object) -> bytes:
    body: dict[str, object] = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    if sim:
        body["sim"] = sim
    return orjson.dumps({"custom_id": custom_id, "method": "POST", "url": CHAT, "body": body})


def _provider(lines: list[bytes], **plan: float) -> tuple[OpenAIBatches, _Clock, str]:
    clock = _Clock()
    state = OpenAIBatches(lambda: clock.now)
    stored = state.upload("in.jsonl", "batch", b"\n".join(lines) + b"\n")
    body = {"input_file_id": stored["id"], "endpoint": CHAT, "completion_window": "24h"}
    batch_id = state.create(body, sim.directives({"sim": plan}))
    return state, clock, batch_id


def _files(state: OpenAIBatches, view: dict[str, object]) -> tuple[bytes, bytes]:
    out, err = view["output_file_id"], view["error_file_id"]
    output = state.file_content(out) if isinstance(out, str) else None
    errors = state.file_content(err) if isinstance(err, str) else None
    return output or b"", errors or b""


def test_a_completed_part_maps_every_line_once_in_order() -> None:
    ids = ["a", "b", "c"]
    state, clock, batch_id = _provider([_line("a"), _line("b", outcome="failed"), _line("c")])
    live = results.part_state(state.retrieve(batch_id) or {})
    assert not live.ended or live.status == "completed"
    clock.now += 1
    view = state.retrieve(batch_id) or {}
    part = results.part_state(view)
    assert part.ended and part.status == "completed"
    assert part.counts == RequestCounts(total=3, completed=2, failed=1)
    output, errors = _files(state, view)
    mapped = results.lines_back(ids, status=part.status, output=output, errors=errors)
    assert [(m.custom_id, m.succeeded) for m in mapped] == [("a", True), ("b", False), ("c", True)]
    assert mapped[1].line["response"]["status_code"] == 500


@pytest.mark.parametrize("how", ["expired", "cancelled"])
def test_an_ended_part_keeps_what_ran_and_says_why_the_rest_did_not(how: str) -> None:
    ids = [f"c{n}" for n in range(4)]
    plan = {"latency_s": 10.0, "expires_after_s": 6.0} if how == "expired" else {"latency_s": 10.0}
    state, clock, batch_id = _provider([_line(i) for i in ids], **plan)
    clock.now += 4
    if how == "cancelled":
        state.cancel(batch_id)
    clock.now += 3
    view = state.retrieve(batch_id) or {}
    part = results.part_state(view)
    assert part.status == how
    output, errors = _files(state, view)
    mapped = results.lines_back(ids, status=part.status, output=output, errors=errors)
    assert [m.custom_id for m in mapped] == ids
    done = [m.custom_id for m in mapped if m.succeeded]
    assert done == (["c0", "c1"] if how == "expired" else ["c0"])
    code = "batch_expired" if how == "expired" else "batch_cancelled"
    assert {m.line["error"]["code"] for m in mapped if not m.succeeded} == {code}


def test_a_failed_part_gives_every_line_an_error() -> None:
    state, clock, batch_id = _provider([_line("a"), _line("a")])  # a duplicate custom_id
    clock.now += 1
    part = results.part_state(state.retrieve(batch_id) or {})
    assert part.status == "failed" and part.counts == RequestCounts()
    mapped = results.lines_back(["a", "b"], status="failed", output=b"", errors=b"")
    assert [m.line["error"]["code"] for m in mapped] == ["batch_failed", "batch_failed"]


def test_an_unknown_status_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown provider batch status"):
        results.part_state({"status": "paused"})


@hypothesis.given(
    ids=st.lists(st.text(min_size=1, max_size=5), min_size=1, max_size=8, unique=True),
    junk=st.lists(st.binary(max_size=30), max_size=5),
    status=st.sampled_from(sorted(results.ENDED)),
)
def test_any_files_give_each_line_of_the_part_once(
    ids: list[str], junk: list[bytes], status: str
) -> None:
    lines = [orjson.dumps({"custom_id": c, "response": {"status_code": 200}}) for c in ids[::2]]
    output = b"\n".join([*lines, *junk, *lines])  # repeated and broken lines too
    mapped = results.lines_back(ids, status=status, output=output, errors=b"\n".join(junk))
    assert [m.custom_id for m in mapped] == ids
    assert [m.succeeded for m in mapped] == [i % 2 == 0 for i in range(len(ids))]
