"""The batches role: turns batch lines into jobs (or, for providers with native batches, into
provider batches: roles/native_dispatch.py, provider_batch_poll.py), follows them, cancels
and expires, and writes the output and error files (roles/batch_results.py).
`batches_once()` is one pass; `run()` loops.

A pass leases the live batches, each with a new token, and every write it makes for a batch
names that token: a pass that outlived its lease (another process took the batch over) writes
nothing more. A chunk of lines becomes its jobs, its line records and the cursor's move in one
transaction, so a pass killed at any point loses and doubles nothing, and a cancel or expiry
reaches every job the batch created. A batch whose passes keep failing fails alone."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from datetime import datetime
from typing import Any, Protocol

import orjson

from jobgate import errors, failpoints, wakeups
from jobgate.domain import events
from jobgate.domain.job import NewJob
from jobgate.roles import batch_results
from jobgate.roles.native_dispatch import NativeBatches
from jobgate.roles.provider_batch_poll import PartFollower
from jobgate.services.jobs import JobService, SubmitSpec
from jobgate.storage import protocol
from jobgate.storage.records import BatchChunk, BatchRecord, FileChunk, NewBatchItem
from jobgate.wire import openai_batches as batches
from jobgate.wire.openai_batches import BatchStatus

log = logging.getLogger(__name__)

INTERVAL_S = 1.0
BATCHES_PER_PASS = 8
CHUNKS_PER_PASS = 4  # input chunks (about 256 KiB each) expanded per batch per pass
CANCELS_PER_PASS = 500
# A batch on which this many passes in a row failed (a value the database refuses, a bug) is
# failed with an error: it must not hold up the others, nor be retried forever; a passing
# glitch costs a retry.
MAX_FAILED_PASSES = 3
# An in-progress batch's counts are read for its `batch.progress` webhooks at most this often
# (each endpoint's progress_interval_s throttles the sends), and only for a tenant with an
# endpoint that lists the event.
PROGRESS_EVERY_S = 1.0
ENDPOINTS_PAGE = 100
PROGRESS_FORGET_S = 600.0  # a batch not seen for this long is forgotten (it ended elsewhere)


class LineCheck(Protocol):
    """How a batch line's request is checked: exactly as its HTTP route checks the same
    request (http/batch_lines.py, handed over by the composition root). Raises
    errors.InvalidRequest naming the parameter."""

    def __call__(self, endpoint: str, body: dict[str, Any]) -> SubmitSpec: ...


class BatchRunner:
    def __init__(
        self,
        *,
        jobs: JobService,
        check_line: LineCheck,
        interval_s: float = INTERVAL_S,
        native: NativeBatches | None = None,
    ) -> None:
        self.jobs = jobs
        self.check_line = check_line
        self.storage: protocol.BatchRunnerStorage = jobs.storage
        self.interval_s = interval_s
        # Provider-native batches: lines whose provider has them go to its batch API.
        self.native = native or NativeBatches(
            storage=self.storage, configs=jobs.providers.configs()
        )
        self.parts = PartFollower(
            storage=self.storage,
            native=self.native,
            poll_interval_s=jobs.settings.batch_poll_interval_s,
            monotonic=jobs.clock.monotonic,
        )
        # A pass on one batch must end well within its lease (as a worker's call within the
        # job's): a process killed mid-pass delays the batch by at most this much.
        self.lease_s = jobs.settings.lease_ttl_s
        self._stopping = False
        self._wake = wakeups.Wakeup()
        # Per in-progress batch: when its counts were last read, and the figures last armed.
        self._progress: dict[str, tuple[float, tuple[int, int] | None]] = {}
        self._subscribed: dict[str, bool] = {}  # per tenant: an endpoint lists batch.progress
        # Whether the last pass moved a batch on: a pass that only found batches waiting for
        # their jobs is followed by a sleep, not at once by another pass.
        self._moved = False

    # -- one pass -----------------------------------------------------------------------

    async def batches_once(self, *, now: datetime | None = None) -> int:
        """Work one step on each live batch no other batches role holds; answers how many."""
        self._moved = False
        claimed = await self.storage.batch_claim_live(
            limit=BATCHES_PER_PASS, lease_s=self.lease_s, now=now
        )
        self._subscribed = {}
        for batch in claimed:
            await self._work_on(batch, now)
        moment = self.jobs.clock.monotonic()
        for stale in [
            batch_id
            for batch_id, (read_at, _) in self._progress.items()
            if moment - read_at > PROGRESS_FORGET_S
        ]:
            del self._progress[stale]
        return len(claimed)

    async def _work_on(self, claimed: BatchRecord, now: datetime | None) -> None:
        """One step on one batch, its lease renewed first (each batch of a pass gets a whole
        lease, whatever the ones before it took) and released after; a failure stays with
        this batch."""
        batch = await self._update(claimed, batches.LIVE, lease_s=self.lease_s, now=now)
        if batch is None:
            return  # taken over already
        try:
            await self.step(batch, now=now)
        except errors.StorageUnavailable:
            # The database is unwell: the loop backs off. Released if it can be, so that the
            # next pass need not wait the lease out (a step may be redone, never doubled).
            with contextlib.suppress(errors.StorageError):
                await self._update(batch, tuple(BatchStatus), release=True, now=now)
            raise
        except batch_results.LeaseLost:
            return  # another pass holds the batch now: nothing more to write
        except Exception as exc:  # a batch that cannot be handled fails alone
            await self._failed_pass(batch, exc, now)
            return
        await self._update(
            batch,
            tuple(BatchStatus),
            failures=0 if batch.failures else None,
            release=True,
            now=now,
        )

    async def step(self, batch: BatchRecord, *, now: datetime | None = None) -> None:
        """One step on a batch this pass holds (`batch.lease_token`)."""
        if batch.status == BatchStatus.VALIDATING:
            self._moved = True
            await self._validate(batch, now)
            return  # a whole step: the next pass expands
        if batch.status == BatchStatus.IN_PROGRESS and batch.final_status is None:
            moment = now or await self.storage.database_now()
            if moment >= batch.expires_at:
                expired = await self._update(
                    batch, (BatchStatus.IN_PROGRESS,), final_status=BatchStatus.EXPIRED, now=now
                )
                if expired is None:
                    return
                self._moved = True
                batch = expired
                log.info("batch expired", extra={"batch_id": batch.id})
        if batch.status in (BatchStatus.IN_PROGRESS, BatchStatus.CANCELLING):
            moved = await self._settle(batch, now)
            if moved is None:
                await self._note_progress(batch, now)
                return
            self._moved = True
            batch = moved
        if batch.status == BatchStatus.FINALIZING:
            self._moved = True
            await batch_results.finalize(
                self.storage,
                self.jobs.ids,
                batch,
                now,
                expires_after_s=self.jobs.settings.files_expire_after_s,
            )

    async def _validate(self, batch: BatchRecord, now: datetime | None) -> None:
        """Check every line of the input file as OpenAI validates a batch: in progress (its
        requests counted, its model known), or failed with the lines' errors and no job."""
        validation = batches.Validation(
            endpoint=batch.endpoint,
            max_lines=self.jobs.settings.batch_max_lines,
            providers=frozenset(self.jobs.providers.configs()),
        )
        seq = 0
        while True:
            chunks = await self.storage.file_chunks(
                file_id=batch.input_file_id, from_seq=seq, limit=CHUNKS_PER_PASS
            )
            for chunk in chunks:
                for number, raw in batches.chunk_lines(chunk.data, chunk.first_line):
                    validation.check(raw, number)
            if len(chunks) < CHUNKS_PER_PASS:
                break
            seq = chunks[-1].seq + 1
        refused = validation.finish()
        if refused:
            assert batch.lease_token is not None
            failed = await self.storage.batch_fail(
                batch_id=batch.id,
                lease_token=batch.lease_token,
                errors={"object": "list", "data": [error.view() for error in refused]},
                now=now,
            )
            if failed is not None:
                log.info(
                    "batch failed validation",
                    extra={"batch_id": batch.id, "count": len(refused), "code": refused[0].code},
                )
            return
        await self._update(
            batch,
            (BatchStatus.VALIDATING,),
            status=BatchStatus.IN_PROGRESS,
            total=validation.lines,
            model=validation.model,
            now=now,
        )

    async def _settle(self, batch: BatchRecord, now: datetime | None) -> BatchRecord | None:
        """The batch moved to finalizing once every line ended (None: not yet). A cancel or
        expiry already set stays: the move to `completed` applies only to an in-progress
        batch with no final status, so a cancel the API accepted meanwhile wins."""
        if batch.final_status is None:
            if not await self._expand(batch, now):
                return None  # more lines to expand next pass
            # Every chunk is expanded, each with all its lines: only the jobs and the provider
            # batches may be running.
            if not await self.native.dispatch(batch):
                return None  # parts still to send
            parts_ended = await self.parts.follow(batch)
            if not parts_ended or await self.storage.batch_live_job_ids(batch_id=batch.id, limit=1):
                return None
            self.native.forget(batch.id)
            return await self._update(
                batch,
                (BatchStatus.IN_PROGRESS,),
                status=BatchStatus.FINALIZING,
                final_status=BatchStatus.COMPLETED,
                unsettled=True,
                now=now,
            )
        parts_ended = await self.parts.follow(batch)  # live parts cancelled at the provider
        if await self._stop_live(batch) or not parts_ended:
            return None  # jobs or provider batches still stopping
        self.native.forget(batch.id)
        return await self._update(
            batch,
            (BatchStatus.IN_PROGRESS, BatchStatus.CANCELLING),
            status=BatchStatus.FINALIZING,
            now=now,
        )

    async def _note_progress(self, batch: BatchRecord, now: datetime | None) -> None:
        """Arm the batch's `batch.progress` webhooks when its counts moved since the last
        arming (at most once per PROGRESS_EVERY_S). Best effort: a failure is logged."""
        if batch.status != BatchStatus.IN_PROGRESS:
            return
        moment = self.jobs.clock.monotonic()
        read_at, armed = self._progress.get(batch.id, (None, None))
        if read_at is not None and moment - read_at < PROGRESS_EVERY_S:
            return
        try:
            if not await self._wants_progress(batch.tenant_id):
                return
            self._progress[batch.id] = (moment, armed)
            counts = await self.storage.batch_counts(batch_id=batch.id)
            figures = (counts.completed, counts.failed)
            if figures == armed:
                return
            await self.storage.outbox_batch_progress_arm(batch_id=batch.id, now=now)
            self._progress[batch.id] = (moment, figures)
        except errors.StorageError as exc:
            log.warning(
                "batch progress webhooks not armed: %s",
                type(exc).__name__,
                extra={"batch_id": batch.id},
            )

    async def _wants_progress(self, tenant_id: str) -> bool:
        """Whether an enabled endpoint of the tenant lists `batch.progress` (asked once per
        tenant per pass)."""
        if tenant_id not in self._subscribed:
            self._subscribed[tenant_id] = False
            after = None
            while True:
                page = await self.storage.webhook_endpoint_list(
                    tenant_id=tenant_id, after=after, limit=ENDPOINTS_PAGE
                )
                if any(not e.disabled and events.BATCH_PROGRESS in e.event_types for e in page):
                    self._subscribed[tenant_id] = True
                    break
                if len(page) < ENDPOINTS_PAGE:
                    break
                after = page[-1].id
        return self._subscribed[tenant_id]

    async def _failed_pass(self, batch: BatchRecord, exc: Exception, now: datetime | None) -> None:
        self._moved = True  # retried at once (a few times), not after a sleep
        failures = batch.failures + 1
        log.warning(
            "batch pass failed",
            exc_info=exc,
            extra={"batch_id": batch.id, "tenant_id": batch.tenant_id, "count": failures},
        )
        if failures < MAX_FAILED_PASSES:
            await self._update(batch, batches.LIVE, failures=failures, release=True, now=now)
            return
        error = {
            "code": "batch_processing_failed",
            # The exception's type only: its message may quote the database or the input.
            "message": f"the batch could not be processed ({type(exc).__name__}, "
            f"{failures} attempts)",
            "param": None,
            "line": None,
        }
        assert batch.lease_token is not None
        failed = await self.storage.batch_fail(
            batch_id=batch.id,
            lease_token=batch.lease_token,
            errors={"object": "list", "data": [error]},
            failures=failures,
            now=now,
        )
        if failed is not None:
            log.error("batch failed", extra={"batch_id": batch.id, "tenant_id": batch.tenant_id})
            await self._cancel_leftovers(failed)

    async def _cancel_leftovers(self, batch: BatchRecord) -> None:
        """The jobs a failed batch still has queued or running are cancelled, and its provider
        batches (best effort: the batch's own reads may be what fails)."""
        try:
            while await self._stop_live(batch):
                pass
            await self.parts.cancel_all(batch)
        except Exception as exc:  # the batch failed already: nothing to add
            log.warning(
                "jobs of a failed batch not cancelled: %s",
                type(exc).__name__,
                extra={"batch_id": batch.id},
            )

    async def _update(
        self, batch: BatchRecord, from_statuses: tuple[str, ...], **changes: Any
    ) -> BatchRecord | None:
        """batch_update fenced by this pass's lease token."""
        return await self.storage.batch_update(
            batch_id=batch.id,
            from_statuses=from_statuses,
            lease_token=batch.lease_token,
            **changes,
        )

    # -- expansion ----------------------------------------------------------------------

    async def _expand(self, batch: BatchRecord, now: datetime | None) -> bool:
        """Turn up to CHUNKS_PER_PASS input chunks into jobs; True once every line is."""
        chunks = await self.storage.file_chunks(
            file_id=batch.input_file_id, from_seq=batch.expanded_chunks, limit=CHUNKS_PER_PASS
        )
        for chunk in chunks:
            if not await self._expand_chunk(batch, chunk, now):
                return False
        return len(chunks) < CHUNKS_PER_PASS

    async def _expand_chunk(
        self, batch: BatchRecord, chunk: FileChunk, now: datetime | None
    ) -> bool:
        """Store one chunk's jobs and lines together; False when expansion must stop (the
        queue is full, or the batch was cancelled, expired or taken over)."""
        assert batch.lease_token is not None
        lines = [
            (number, orjson.loads(raw))
            for number, raw in batches.chunk_lines(chunk.data, chunk.first_line)
        ]
        specs = [self._spec(batch, line) for _, line in lines]
        admission = await self.jobs.limits.admission(batch.tenant_id, adding=len(lines) - 1)
        if admission.full is not None:
            log.info("batch expansion waits: queue full", extra={"batch_id": batch.id})
            return False
        await self.jobs.fresh_breakers([s for s in specs if isinstance(s, SubmitSpec)])
        prepare = self.jobs.preparer(batch.tenant_id, batch_serves=self.native.serves)
        jobs: list[NewJob] = []
        items: list[NewBatchItem] = []
        for (number, line), spec in zip(lines, specs, strict=True):
            custom_id = line["custom_id"]
            try:
                if not isinstance(spec, SubmitSpec):
                    raise spec
                prepared = prepare(spec, None)
                native = self._native_item(number, custom_id, prepared, line["body"])
                if native is not None:
                    items.append(native)
                    continue
                job = admission.admit(prepared)
            except errors.QueueFull:
                log.info("batch expansion waits: queue full", extra={"batch_id": batch.id})
                return False
            except errors.StorageError:
                raise
            except Exception as exc:  # a line that cannot be run is refused alone
                items.append(_refused(number, custom_id, exc, batch.endpoint))
                continue
            jobs.append(job)
            items.append(NewBatchItem(line=number, custom_id=custom_id, job_id=job.id))
        chunk_write = BatchChunk(batch.id, batch.lease_token, jobs, items, chunk.seq + 1)
        try:
            moved = await self.storage.batch_chunk_insert(
                chunk=chunk_write, queue_limit=admission.bounds, now=now
            )
        except errors.QueueFull:
            log.info("batch expansion waits: queue full", extra={"batch_id": batch.id})
            return False
        if moved is None:
            return False  # cancelled, expired or taken over meanwhile: nothing was stored
        failpoints.hit("batch_chunk_committed")
        self._moved = True
        if jobs:
            self.jobs.limits.admitted(batch.tenant_id, len(jobs))
            log.info(
                "jobs submitted",
                extra={"tenant_id": batch.tenant_id, "batch_id": batch.id, "count": len(jobs)},
            )
        return True

    def _native_item(
        self, number: int, custom_id: str, job: NewJob, body: dict[str, Any]
    ) -> NewBatchItem | None:
        """The line as a provider-native batch's line, when its provider has native batches
        for its endpoint (None: it runs as `job`): the caller's `body` with the model the
        provider knows. Raises errors.InvalidRequest for a line the provider's batches cannot
        take (too large, or not expressible for it)."""
        api = self.native.takes(job)
        if api is None:
            return None
        request = body if job.model is None else {**body, "model": job.model}
        if not self.native.fits(api, request, job.endpoint, number):
            raise errors.InvalidRequest(
                f"the request is larger than provider {job.provider!r} takes in a batch",
                param="body",
                code="request_too_large",
            )
        return NewBatchItem(
            line=number, custom_id=custom_id, job_id=None, provider=job.provider,
            request=request,
        )  # fmt: skip

    def _spec(self, batch: BatchRecord, line: dict[str, Any]) -> SubmitSpec | Exception:
        """The line's submit as its route checks it, made the batch's own (its metadata and
        priority); the refusal instead, whatever the body held."""
        try:
            spec = self.check_line(batch.endpoint, line["body"])
        except Exception as exc:  # a body no route would take is this line's error alone
            return exc
        # The job's metadata is jsonb on PostgreSQL, which refuses a NUL: it shows one as
        # U+FFFD (the batch's lines and files keep the custom_id exactly).
        custom_id = line["custom_id"].replace("\x00", "\ufffd")
        return dataclasses.replace(
            spec,
            metadata={"batch_id": batch.id, "custom_id": custom_id},
            priority=batch.priority,
        )

    # -- cancel and expiry --------------------------------------------------------------

    async def _stop_live(self, batch: BatchRecord) -> bool:
        """Cancel the batch's queued jobs and ask running ones to stop; True while any live."""
        live = await self.storage.batch_live_job_ids(batch_id=batch.id, limit=CANCELS_PER_PASS)
        for job_id in live:
            await self.jobs.cancel(
                tenant_id=batch.tenant_id, job_id=job_id, actor=f"batch:{batch.final_status}"
            )
        if not live:
            return False
        self._moved = True
        return bool(await self.storage.batch_live_job_ids(batch_id=batch.id, limit=1))

    # -- the loop -----------------------------------------------------------------------

    def request_stop(self) -> None:
        self._stopping = True
        self._wake.set()

    async def run(self) -> None:
        try:
            while not self._stopping:
                try:
                    await self.batches_once()
                except errors.StorageError as exc:
                    log.warning("batches pass failed: %s", type(exc).__name__)
                    self._moved = False
                if not self._moved:
                    await self._wake.sleep(self.interval_s)
        finally:
            await self.native.aclose()


def _refused(line: int, custom_id: str, exc: Exception, endpoint: str) -> NewBatchItem:
    """A line refused as its route would answer it: a 4xx problem's error, or (a fault of
    jobgate's, which the route would answer 500) a server error naming no detail."""
    if not isinstance(exc, errors.JobgateError):
        log.error("batch line refused by a fault", exc_info=exc)
        error = {
            "message": f"the request could not be handled ({type(exc).__name__})",
            "type": "server_error",
            "code": "internal_error",
            "param": None,
            "status": 500,
        }
        return NewBatchItem(line=line, custom_id=custom_id, job_id=None, error=error)
    param = getattr(exc, "param", None)
    if endpoint == batches.RESPONSES and param and param.startswith("body."):
        param = param.removeprefix("body.")  # a Responses body is the request itself
    error = {
        "message": exc.message,
        "type": "invalid_request_error",
        "code": exc.code,
        "param": param,
        "status": exc.status if isinstance(exc, errors.LimitExceeded) else 400,
    }
    return NewBatchItem(line=line, custom_id=custom_id, job_id=None, error=error)
