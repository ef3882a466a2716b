"""The worker side of live output streaming, on both stores: a streaming job's deltas land in
its output log in batches before the verdict, fenced on the lease; a provider that cannot
stream gives one delta at completion; the batcher bounds its memory and never writes a batch
twice after an unknown outcome."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

import pytest

from jobgate import errors
from jobgate.config import ProviderConfig, Settings
from jobgate.domain.job import Lease
from jobgate.domain.states import JobState
from jobgate.process.runtime import Runtime
from jobgate.providers.base import ProviderCall, ProviderResult, Usage
from jobgate.providers.registry import ProviderRegistry
from jobgate.providers.simulated import SimProvider
from jobgate.providers.streaming import DeltaSink
from jobgate.roles.output_stream import OutputBatcher
from jobgate.services.jobs import SubmitSpec
from jobgate.storage.protocol import Storage
from jobgate.storage.records import OutputChunk
from jobgate.testing import FakeClock, ScriptedProvider, SequentialIds, Succeed, eventually
from jobgate.wire.content import output_text, split_evenly
from tests.storage.helpers import release

CHAT = "/v1/chat/completions"
ANSWER = {"choices": [{"message": {"role": "assistant", "content": "whole answer"}}]}


class StreamingScripted(ScriptedProvider):
    """Streams `pieces`, pausing before the piece at `pause_at` until `resume` is set."""

    def __init__(self) -> None:
        super().__init__("scripted")
        self.pieces = ["a", "b", "c"]
        self.pause_at: int | None = None
        self.paused = asyncio.Event()
        self.resume = asyncio.Event()
        self.cancelled = False

    def streams(self, endpoint: str) -> bool:
        return True

    async def stream(self, call: ProviderCall, on_delta: DeltaSink) -> ProviderResult:
        self.calls.append(call)
        for index, piece in enumerate(self.pieces):
            if index == self.pause_at:
                self.paused.set()
                try:
                    await self.resume.wait()
                except asyncio.CancelledError:
                    self.cancelled = True
                    raise
            await on_delta(piece)
        text = "".join(self.pieces)
        body = {"choices": [{"message": {"role": "assistant", "content": text}}]}
        return ProviderResult(body=body, usage=Usage(3, len(self.pieces)))


@pytest.fixture
def streamer() -> StreamingScripted:
    return StreamingScripted()


@pytest.fixture
def stream_runtime(
    storage: Storage, settings: Settings, clock: FakeClock, streamer: StreamingScripted
) -> Runtime:
    plain = ScriptedProvider("plain", default=_succeed_with(ANSWER))
    registry = ProviderRegistry(
        {"sim": SimProvider("sim", clock=clock), "scripted": streamer, "plain": plain},
        configs={
            "sim": ProviderConfig(kind="sim", model_prefixes=("sim-",)),
            "scripted": ProviderConfig(kind="sim"),
            "plain": ProviderConfig(kind="sim"),
        },
        default="sim",
    )
    return Runtime(settings, storage=storage, clock=clock, ids=SequentialIds(), providers=registry)


def _succeed_with(body: dict[str, Any]) -> Succeed:
    return Succeed(body)


async def _submit(runtime: Runtime, provider: str, *, stream: bool = True, **body: Any) -> str:
    owner = (await runtime.tenants.create("acme")).tenant
    request: dict[str, Any] = {
        "model": "sim-echo",
        "messages": [{"role": "user", "content": "hello there"}],
    }
    request.update(body)
    outcome = await runtime.jobs.submit(
        tenant_id=owner.id,
        spec=SubmitSpec(endpoint=CHAT, body=request, provider=provider, stream=stream),
    )
    return outcome.job.id


async def test_a_streamed_sim_job_writes_its_text_before_the_verdict(
    stream_runtime: Runtime,
) -> None:
    job_id = await _submit(stream_runtime, "sim", sim={"latency_s": 1.0, "chunks": 10})
    [done] = await stream_runtime.worker().run_once()
    assert done is not None and done.state is JobState.SUCCEEDED
    chunks = await stream_runtime.storage.job_output_read(job_id=job_id)
    assert chunks and len(chunks) <= 10  # batched: never more writes than deltas
    assert "".join(c.text for c in chunks) == output_text(done.result)
    assert all(c.created_at <= done.completed_at for c in chunks if done.completed_at)
    assert done.usage is not None and done.usage["output_tokens"] > 0


async def test_the_stream_member_never_reaches_the_provider(
    stream_runtime: Runtime, streamer: StreamingScripted
) -> None:
    await _submit(stream_runtime, "scripted")
    await stream_runtime.worker().run_once()
    (call,) = streamer.calls
    assert "stream" not in call.body


async def test_a_job_that_did_not_ask_writes_no_output(stream_runtime: Runtime) -> None:
    job_id = await _submit(stream_runtime, "sim", stream=False)
    [done] = await stream_runtime.worker().run_once()
    assert done is not None and done.state is JobState.SUCCEEDED
    assert await stream_runtime.storage.job_output_read(job_id=job_id) == []


async def test_a_provider_without_streaming_gives_one_delta_at_completion(
    stream_runtime: Runtime,
) -> None:
    job_id = await _submit(stream_runtime, "plain")
    [done] = await stream_runtime.worker().run_once()
    assert done is not None and done.state is JobState.SUCCEEDED
    chunks = await stream_runtime.storage.job_output_read(job_id=job_id)
    assert [c.text for c in chunks] == ["whole answer"]


async def test_a_lost_lease_stops_the_stream_and_writes_nothing_more(
    stream_runtime: Runtime, streamer: StreamingScripted
) -> None:
    streamer.pause_at = 2
    job_id = await _submit(stream_runtime, "scripted")
    worker = stream_runtime.worker()
    running = asyncio.create_task(worker.run_once())
    await asyncio.wait_for(streamer.paused.wait(), 5)
    lease = worker.held_leases()[0]
    await release(stream_runtime.storage, leases=[lease], reason="test")  # taken away
    streamer.resume.set()
    assert await asyncio.wait_for(running, 5) == [None]
    job = await stream_runtime.storage.job_get(job_id=job_id)
    assert job is not None and job.state is JobState.QUEUED
    chunks = await stream_runtime.storage.job_output_read(job_id=job_id)
    assert "".join(c.text for c in chunks) in ("", "a", "ab")  # never "abc": fenced off


async def test_a_retried_attempt_streams_under_a_new_generation(
    stream_runtime: Runtime, streamer: StreamingScripted
) -> None:
    streamer.pause_at = 2
    job_id = await _submit(stream_runtime, "scripted")
    stale = stream_runtime.worker(worker_id="stale")
    running = asyncio.create_task(stale.run_once())
    await asyncio.wait_for(streamer.paused.wait(), 5)

    async def written() -> bool:  # the batcher writes "ab" within its delay
        return bool(await stream_runtime.storage.job_output_read(job_id=job_id))

    await eventually(written, what="the first chunk written")
    # The job is taken from the stale worker (as the reaper would) and runs again.
    await release(stream_runtime.storage, leases=stale.held_leases(), reason="test")
    streamer.resume.set()
    assert await asyncio.wait_for(running, 5) == [None]
    streamer.pause_at = None
    [done] = await stream_runtime.worker(worker_id="fresh").run_once()
    assert done is not None and done.state is JobState.SUCCEEDED
    chunks = await stream_runtime.storage.job_output_read(job_id=job_id)
    generations = sorted({c.generation for c in chunks})
    assert len(generations) == 2
    assert "".join(c.text for c in chunks if c.generation == generations[0]) == "ab"
    assert "".join(c.text for c in chunks if c.generation == generations[-1]) == "abc"


# -- the batcher alone, against a fake log -------------------------------------------------


class FakeLog:
    def __init__(self) -> None:
        self.chunks: list[OutputChunk] = []
        self.calls = 0
        self.fail_after_commit = 0  # the next N appends commit, then raise (reply lost)
        self.fail_before = 0  # the next N appends raise without storing
        self.gate: asyncio.Event | None = None  # appends wait for it
        self.armed = 0  # progress webhooks armed
        self.arm_fails = False

    async def job_output_append(
        self, *, lease: Lease, text: str, continued_chars: int = 0, now: datetime | None = None
    ) -> OutputChunk:
        self.calls += 1
        if self.gate is not None:
            await self.gate.wait()
        if self.fail_before:
            self.fail_before -= 1
            raise errors.StorageUnavailable("down")
        now = datetime.now()  # noqa: DTZ005
        chunk = OutputChunk(lease.job_id, len(self.chunks) + 1, 1, text, now, continued_chars)
        self.chunks.append(chunk)
        if self.fail_after_commit:
            self.fail_after_commit -= 1
            raise errors.StorageUnavailable("reply lost")
        return chunk

    async def job_output_read(
        self, *, job_id: str, after_seq: int = 0, limit: int = 1000
    ) -> list[OutputChunk]:
        return [c for c in self.chunks if c.seq > after_seq][:limit]

    async def job_output_chars(self, *, job_id: str, generation: int) -> int:
        return sum(len(c.text) for c in self.chunks if c.generation == generation)

    async def outbox_progress_arm(self, *, job_id: str, now: datetime | None = None) -> int:
        self.armed += 1
        if self.arm_fails:
            raise errors.StorageUnavailable("down")
        return 1


async def _nothing() -> None:
    pass


def _batcher(log: FakeLog, **options: float) -> OutputBatcher:
    return OutputBatcher(
        log,
        Lease("job_1", "t"),
        generation=1,
        clock=FakeClock(),
        on_fenced=_nothing,
        on_failed=lambda _: None,
        **options,  # type: ignore[arg-type]
    )


async def test_the_first_delta_is_written_at_once_and_the_rest_together() -> None:
    log = FakeLog()
    batcher = _batcher(log, max_delay_s=0.05)
    pieces = split_evenly("x" * 200, 100)
    await batcher.add(pieces[0])
    await asyncio.sleep(0.01)  # written at once, without waiting for company
    assert [c.text for c in log.chunks] == [pieces[0]]
    for piece in pieces[1:]:
        await batcher.add(piece)
    await batcher.close()
    assert [c.text for c in log.chunks] == [pieces[0], "x" * 198]


async def test_a_full_batch_is_written_without_waiting_for_the_delay() -> None:
    log = FakeLog()
    batcher = _batcher(log, max_delay_s=60, batch_bytes=10)
    await batcher.add("first")
    await asyncio.sleep(0.01)
    await batcher.add("0123456789")
    for _ in range(100):
        if len(log.chunks) == 2:
            break
        await asyncio.sleep(0)
    assert [c.text for c in log.chunks] == ["first", "0123456789"]
    await batcher.close()


async def test_closing_waits_for_a_write_in_flight_and_never_repeats_it() -> None:
    log = FakeLog()
    log.gate = asyncio.Event()
    batcher = _batcher(log, max_delay_s=0)
    await batcher.add("once")
    await asyncio.sleep(0.01)  # the write is in flight, held at the gate
    closing = asyncio.create_task(batcher.close())
    await asyncio.sleep(0.01)
    assert not closing.done()
    log.gate.set()
    await asyncio.wait_for(closing, 5)
    assert [c.text for c in log.chunks] == ["once"] and log.calls == 1


async def test_memory_is_bounded_while_the_database_is_slow() -> None:
    log = FakeLog()
    log.gate = asyncio.Event()
    batcher = _batcher(log, max_delay_s=0, batch_bytes=4, max_buffer_bytes=8)
    await batcher.add("aaaa")
    await batcher.add("bbbb")
    blocked = asyncio.create_task(batcher.add("cccc"))
    await asyncio.sleep(0.01)
    assert not blocked.done()  # the producer waits: the unwritten buffer is full
    log.gate.set()
    await asyncio.wait_for(blocked, 5)
    await batcher.close()
    assert "".join(c.text for c in log.chunks) == "aaaabbbbcccc"


async def test_a_write_whose_reply_was_lost_is_not_written_twice() -> None:
    log = FakeLog()
    log.fail_after_commit = 1
    batcher = _batcher(log)
    await batcher.add("once")
    await batcher.close()
    assert [c.text for c in log.chunks] == ["once"]


async def test_a_write_that_failed_is_retried() -> None:
    log = FakeLog()
    log.fail_before = 2
    batcher = _batcher(log)
    await batcher.add("retried")
    await batcher.close()
    assert [c.text for c in log.chunks] == ["retried"] and log.calls == 3


async def test_a_fenced_append_drops_the_buffer_and_tells_the_worker() -> None:
    fenced: list[bool] = []

    class Fenced(FakeLog):
        async def job_output_append(
            self, *, lease: Lease, text: str, continued_chars: int = 0, now: datetime | None = None
        ) -> OutputChunk:
            self.calls += 1
            raise errors.LeaseLost(lease.job_id)

    async def tell() -> None:
        fenced.append(True)

    log = Fenced()
    batcher = OutputBatcher(
        log, Lease("job_1", "t"), generation=1, clock=FakeClock(),
        on_fenced=tell, on_failed=lambda _: None,
    )  # fmt: skip
    await batcher.add("x")
    await batcher.close()
    await batcher.add("ignored")
    assert fenced == [True] and batcher.stopped and log.calls == 1


async def test_an_append_refused_for_good_is_not_retried() -> None:
    """Only an unavailable database is waited for: any other storage error would come back
    on every retry (the job stayed `running` for good, retrying a write PostgreSQL refused)."""
    failed: list[errors.StorageError] = []

    class Refusing(FakeLog):
        async def job_output_append(
            self, *, lease: Lease, text: str, continued_chars: int = 0, now: datetime | None = None
        ) -> OutputChunk:
            self.calls += 1
            raise errors.StorageError("postgres: CharacterNotInRepertoireError")

    log = Refusing()
    batcher = OutputBatcher(
        log, Lease("job_1", "t"), generation=1, clock=FakeClock(),
        on_fenced=_nothing, on_failed=failed.append,
    )  # fmt: skip
    await batcher.add("x")
    await batcher.close()
    await batcher.add("ignored")
    assert log.calls == 1 and len(failed) == 1 and batcher.stopped


async def test_a_job_deleted_while_it_streams_ends_cancelled_at_once(
    stream_runtime: Runtime, streamer: StreamingScripted
) -> None:
    """The worker has not heard of the cancel (no wake-up reached it); its next append is
    fenced off by the purge, and it finds out why instead of leaving the job `running` until
    its lease runs out."""
    streamer.pause_at = 2
    job_id = await _submit(stream_runtime, "scripted")
    worker = stream_runtime.worker()
    running = asyncio.create_task(worker.run_once())
    await asyncio.wait_for(streamer.paused.wait(), 5)
    job = await stream_runtime.storage.job_get(job_id=job_id)
    assert job is not None
    await stream_runtime.jobs.delete(tenant_id=job.tenant_id, job_id=job_id)
    streamer.resume.set()
    [done] = await asyncio.wait_for(running, 5)
    assert done is not None and done.state is JobState.CANCELLED
    assert await stream_runtime.storage.job_output_read(job_id=job_id) == []


def test_the_provider_never_gets_the_stream_request() -> None:
    from jobgate.roles.output_stream import provider_body
    from jobgate.services.output_progress import wants_stream
    from tests.domain.test_responses_domain import make_job

    streaming = make_job(JobState.QUEUED, request={"input": "x", "stream": True})
    assert wants_stream(streaming) and provider_body(streaming) == {"input": "x"}
    plain = make_job(JobState.QUEUED, request={"input": "x"})
    assert not wants_stream(plain) and provider_body(plain) is plain.request


# -- progress webhooks ----------------------------------------------------------------------


async def _write(batcher: OutputBatcher, log: FakeLog, text: str) -> None:
    before = len(log.chunks)
    await batcher.add(text)
    for _ in range(100):
        if len(log.chunks) > before:
            break
        await asyncio.sleep(0)
    assert len(log.chunks) == before + 1


async def test_progress_is_armed_at_most_once_a_second_per_job() -> None:
    log, clock = FakeLog(), FakeClock()
    batcher = OutputBatcher(
        log, Lease("job_1", "t"), generation=1, clock=clock,
        on_fenced=_nothing, on_failed=lambda _: None, max_delay_s=0,
    )  # fmt: skip
    await _write(batcher, log, "first")  # the first token: at once
    assert log.armed == 1
    clock.advance(0.5)
    await _write(batcher, log, "half a second later")
    assert log.armed == 1
    clock.advance(0.5)
    await _write(batcher, log, "a second after the first")
    assert log.armed == 2
    await batcher.close()


async def test_a_progress_that_cannot_be_armed_leaves_the_stream_alone() -> None:
    log, clock = FakeLog(), FakeClock()
    log.arm_fails = True
    batcher = OutputBatcher(
        log, Lease("job_1", "t"), generation=1, clock=clock,
        on_fenced=_nothing, on_failed=lambda _: None, max_delay_s=0,
    )  # fmt: skip
    await _write(batcher, log, "a")
    clock.advance(1)
    await _write(batcher, log, "b")
    await batcher.close()
    assert log.armed == 2 and not batcher.stopped
    assert "".join(c.text for c in log.chunks) == "ab"
