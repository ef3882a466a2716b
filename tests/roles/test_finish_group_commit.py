"""The worker's group commit of verdicts (roles.finish_group_commit): verdicts queued together,
one by one or as a group, share one write; each caller gets its own outcome."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from jobgate import errors
from jobgate.domain.job import Lease
from jobgate.domain.states import JobState
from jobgate.domain.verdicts import Finish
from jobgate.roles.finish_group_commit import FinishGroupCommit
from jobgate.storage.records import Finished


def _finish(job_id: str) -> Finish:
    return Finish(lease=Lease(job_id, "token"), state=JobState.SUCCEEDED, reason="succeeded")


class _Store:
    """Writes every verdict but those of `fenced` (the fence refuses them) and those of
    `refused` (the database refuses a statement holding one); `down` makes it unavailable."""

    def __init__(self) -> None:
        self.writes: list[list[str]] = []
        self.fenced: set[str] = set()
        self.refused: set[str] = set()
        self.down = False
        self.reasons: list[str] = []

    async def job_finish_many(
        self, *, finishes: Sequence[Finish], now: Any = None
    ) -> list[Finished | None]:
        await asyncio.sleep(0)
        ids = [f.lease.job_id for f in finishes]
        if self.down:
            raise errors.StorageUnavailable("down")
        if self.refused.intersection(ids) and not all(f.reason == "poison_job" for f in finishes):
            raise errors.StorageError("refused")
        self.writes.append(ids)
        self.reasons += [f.reason for f in finishes]
        return [
            None if f.lease.job_id in self.fenced else Finished(f.lease.job_id, f.state, 1)
            for f in finishes
        ]


async def test_a_group_and_single_verdicts_share_one_write_each_with_its_outcome() -> None:
    store = _Store()
    store.fenced.add("b")
    batcher = FinishGroupCommit(store)  # type: ignore[arg-type]
    one = asyncio.ensure_future(batcher.finish(_finish("x")))
    group = asyncio.ensure_future(batcher.finish_many([_finish("a"), _finish("b"), _finish("c")]))
    alone = await one
    outcomes = await group
    assert store.writes == [["x", "a", "b", "c"]]
    assert alone == Finished("x", JobState.SUCCEEDED, 1)
    assert outcomes == [
        Finished("a", JobState.SUCCEEDED, 1),
        None,  # fenced off
        Finished("c", JobState.SUCCEEDED, 1),
    ]
    assert await batcher.finish_many([]) == []


async def test_a_group_gets_each_verdicts_error_and_a_refused_one_fails_alone() -> None:
    store = _Store()
    batcher = FinishGroupCommit(store)  # type: ignore[arg-type]
    store.down = True
    outcomes = await batcher.finish_many([_finish("a"), _finish("b")])
    assert [type(o) for o in outcomes] == [errors.StorageUnavailable] * 2
    store.down = False
    store.refused.add("b")
    outcomes = await batcher.finish_many([_finish("a"), _finish("b"), _finish("c")])
    # The batch was refused: each verdict written alone, the one refused replaced by poison.
    assert store.writes == [["a"], ["b"], ["c"]]
    assert [o.job_id if isinstance(o, Finished) else o for o in outcomes] == ["a", "b", "c"]
    assert store.reasons == ["succeeded", "poison_job", "succeeded"]
