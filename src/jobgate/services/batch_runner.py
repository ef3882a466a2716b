"""The batches role: turns batch lines into jobs (resumably), follows them, cancels and
expires, and writes the output and error files. `batches_once()` is one pass; `run()` loops.

Every step is idempotent, so a process killed at any point loses and doubles nothing: lines
become jobs in chunks with one idempotency key per line (a chunk redone replays its jobs),
the chunk cursor moves only after the chunk's lines are recorded, and the result files have
ids derived from the batch, rewritten whole if a pass died while writing them."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime
from typing import Any

import orjson

from jobgate import errors, failpoints
from jobgate.domain import batches, response_requests, responses
from jobgate.domain.batches import BatchStatus
from jobgate.services import bulk_submit
from jobgate.services.files import ChunkWriter
from jobgate.services.jobs import JobService, SubmitSpec
from jobgate.storage.changes import wait_for
from jobgate.storage.records import BatchItemResult, BatchRecord, NewBatchItem, SubmitOutcome

log = logging.getLogger(__name__)

INTERVAL_S = 1.0
CHUNKS_PER_PASS = 4  # input chunks (about 256 KiB each) expanded per batch per pass
CANCELS_PER_PASS = 500
PAGE = 500
KEY_MARGIN_S = 7 * 86400.0  # line keys outlive the completion window by this much


class BatchRunner:
    def __init__(self, *, jobs: JobService, interval_s: float = INTERVAL_S) -> None:
        self.jobs = jobs
        self.storage = jobs.storage
        self.interval_s = interval_s
        # A pass on one batch must end well within its lease (as a worker's call within the
        # job's): a process killed mid-pass delays the batch by at most this much.
        self.lease_s = jobs.settings.lease_ttl_s
        self._stopping = False
        self._wake = asyncio.Event()

    # -- one pass -----------------------------------------------------------------------

    async def batches_once(self, *, now: datetime | None = None) -> int:
        """Work one step on each live batch no other batches role holds; answers how many."""
        claimed = await self.storage.batch_claim_live(limit=8, lease_s=self.lease_s, now=now)
        for batch in claimed:
            try:
                await self.step(batch, now=now)
            except errors.StorageError:
                raise  # the database is unwell: the loop backs off and tries again
            except Exception as exc:  # a batch that cannot be handled fails alone
                log.exception("batch failed", extra={"batch_id": batch.id})
                await self._fail(batch, exc, now)
            finally:
                await self.storage.batch_update(
                    batch_id=batch.id, from_statuses=tuple(BatchStatus), release=True, now=now
                )
        return len(claimed)

    async def step(self, batch: BatchRecord, *, now: datetime | None = None) -> None:
        if batch.status == BatchStatus.VALIDATING:
            moved = await self.storage.batch_update(
                batch_id=batch.id,
                from_statuses=(BatchStatus.VALIDATING,),
                status=BatchStatus.IN_PROGRESS,
                now=now,
            )
            if moved is None:
                return
            batch = moved
        if batch.status == BatchStatus.IN_PROGRESS and batch.final_status is None:
            moment = now or await self.storage.database_now()
            if moment >= batch.expires_at:
                expired = await self.storage.batch_update(
                    batch_id=batch.id,
                    from_statuses=(BatchStatus.IN_PROGRESS,),
                    final_status=BatchStatus.EXPIRED,
                    now=now,
                )
                if expired is None:
                    return
                batch = expired
                log.info("batch expired", extra={"batch_id": batch.id})
        if batch.status in (BatchStatus.IN_PROGRESS, BatchStatus.CANCELLING):
            if batch.final_status is None:
                if not await self._expand(batch, now):
                    return  # more lines to expand next pass
                counts = await self.storage.batch_counts(batch_id=batch.id)
                if counts.live or counts.items < batch.total:
                    return
                final = BatchStatus.COMPLETED
            else:
                if await self._stop_live(batch):
                    return  # jobs still stopping
                final = BatchStatus(batch.final_status)
            done = await self.storage.batch_update(
                batch_id=batch.id,
                from_statuses=(BatchStatus.IN_PROGRESS, BatchStatus.CANCELLING),
                status=BatchStatus.FINALIZING,
                final_status=final,
                now=now,
            )
            if done is None:
                return
            batch = done
        if batch.status == BatchStatus.FINALIZING:
            await self._finalize(batch, now)

    async def _fail(self, batch: BatchRecord, exc: Exception, now: datetime | None) -> None:
        error = {"code": "internal_error", "message": f"{type(exc).__name__}", "line": None}
        await self.storage.batch_update(
            batch_id=batch.id,
            from_statuses=batches.LIVE,
            status=BatchStatus.FAILED,
            final_status=BatchStatus.FAILED,
            errors={"object": "list", "data": [error]},
            now=now,
        )

    # -- expansion ----------------------------------------------------------------------

    async def _expand(self, batch: BatchRecord, now: datetime | None) -> bool:
        """Turn up to CHUNKS_PER_PASS input chunks into jobs; True once every line is."""
        chunks = await self.storage.file_chunks(
            file_id=batch.input_file_id, from_seq=batch.expanded_chunks, limit=CHUNKS_PER_PASS
        )
        for chunk in chunks:
            lines = chunk.data.split(b"\n")[: chunk.line_count]
            parsed = [orjson.loads(raw) for raw in lines]
            items = [
                self._submit(batch, line, chunk.first_line + offset)
                for offset, line in enumerate(parsed)
            ]
            results: list[bulk_submit.ItemResult] = []
            try:
                # A chunk may hold more lines than one bulk call takes: several transactions,
                # each safe to redo (the keys replay).
                for start in range(0, len(items), bulk_submit.MAX_BULK_ITEMS):
                    results += await bulk_submit.submit_bulk(
                        self.jobs,
                        tenant_id=batch.tenant_id,
                        items=items[start : start + bulk_submit.MAX_BULK_ITEMS],
                        route=f"POST /v1/batches/{batch.id}",
                        key_ttl_s=(
                            batches.COMPLETION_WINDOWS[batch.completion_window] + KEY_MARGIN_S
                        ),
                    )
            except errors.QueueFull:
                log.info("batch expansion waits: queue full", extra={"batch_id": batch.id})
                return False
            failpoints.hit("batch_chunk_jobs_stored")  # jobs stored, lines not yet recorded
            await self.storage.batch_items_put(
                batch_id=batch.id,
                items=[
                    _item(chunk.first_line + offset, line["custom_id"], result)
                    for offset, (line, result) in enumerate(zip(parsed, results, strict=True))
                ],
            )
            failpoints.hit("batch_chunk_lines_recorded")  # lines recorded, cursor not moved
            moved = await self.storage.batch_update(
                batch_id=batch.id,
                from_statuses=(BatchStatus.IN_PROGRESS, BatchStatus.CANCELLING),
                expanded_chunks=chunk.seq + 1,
                now=now,
            )
            if moved is None or moved.final_status is not None:
                return False  # cancelled or expired meanwhile: the next pass stops its jobs
        return len(chunks) < CHUNKS_PER_PASS

    def _submit(
        self, batch: BatchRecord, line: dict[str, Any], number: int
    ) -> bulk_submit.BulkSubmit:
        key = f"line-{number}"  # the input file never changes: a line's number names it
        if line["url"] != batch.endpoint:
            refused = errors.InvalidRequest(
                f"url {line['url']!r} differs from the batch's endpoint {batch.endpoint!r}",
                param="url",
            )
            return bulk_submit.BulkSubmit(None, refused=refused)
        meta = {"batch_id": batch.id, "custom_id": line["custom_id"]}
        try:
            if batch.endpoint == responses.ENDPOINT:
                request = response_requests.parse_create(line["body"])
                spec = SubmitSpec(
                    endpoint=responses.ENDPOINT,
                    body=request.body,
                    metadata=meta,
                    priority=batch.priority,
                    api=responses.API,
                    id_prefix=responses.ID_PREFIX,
                )
            else:
                spec = SubmitSpec(
                    endpoint=batch.endpoint, body=line["body"], metadata=meta,
                    priority=batch.priority,
                )  # fmt: skip
        except errors.InvalidRequest as exc:
            return bulk_submit.BulkSubmit(None, refused=exc)
        return bulk_submit.BulkSubmit(spec, raw_body=line["body"], idempotency_key=key)

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
        remaining = await self.storage.batch_counts(batch_id=batch.id)
        return remaining.live > 0

    # -- finalizing ---------------------------------------------------------------------

    async def _finalize(self, batch: BatchRecord, now: datetime | None) -> None:
        final = BatchStatus(batch.final_status or BatchStatus.COMPLETED)
        output = _ResultFile(self, batch, "output")
        failures = _ResultFile(self, batch, "error")
        await output.open()
        await failures.open()
        completed = 0
        after = 0
        while True:
            page = await self.storage.batch_items_page(
                batch_id=batch.id, after_line=after, limit=PAGE
            )
            for item in page:
                line, ok = await self._result_line(batch, item, final)
                await (output if ok else failures).add(line)
                completed += ok
            if len(page) < PAGE:
                break
            after = page[-1].line
        await self._not_run(batch, final, failures)
        output_id = await output.close()
        error_id = await failures.close()
        # Queued before the batch ends, so a pass killed in between queues it again (once).
        await self.storage.batch_event_insert(
            batch_id=batch.id,
            tenant_id=batch.tenant_id,
            event_type=f"batch.{final}",
            status=str(final),
            now=now,
        )
        done = await self.storage.batch_update(
            batch_id=batch.id,
            from_statuses=(BatchStatus.FINALIZING,),
            status=final,
            completed_count=completed,
            failed_count=batch.total - completed,
            output_file_id=output_id,
            error_file_id=error_id,
            now=now,
        )
        if done is not None:
            log.info(
                "batch finished",
                extra={"batch_id": batch.id, "to_state": str(final), "count": completed},
            )

    async def _result_line(
        self, batch: BatchRecord, item: BatchItemResult, final: BatchStatus
    ) -> tuple[dict[str, Any], bool]:
        line_id = f"batch_req_{item.job_id or f'{batch.id}_{item.line}'}"
        if item.job_id is None:  # refused when expanded
            error = item.item_error or {}
            return batches.output_line(
                line_id=line_id,
                custom_id=item.custom_id,
                job_id=f"{batch.id}_{item.line}",
                status_code=int(error.get("status", 400)),
                body={"error": {k: error.get(k) for k in ("message", "type", "code", "param")}},
            ), False
        if item.state == "succeeded":
            body = item.result
            if batch.endpoint == responses.ENDPOINT:
                job = await self.storage.job_get(job_id=item.job_id)
                body = responses.render(job) if job is not None else body
            return batches.output_line(
                line_id=line_id, custom_id=item.custom_id, job_id=item.job_id,
                status_code=200, body=body,
            ), True  # fmt: skip
        if item.state == "failed":
            error = item.error or {}
            status = batches.failed_status_code(error) or 500
            body = {"error": {k: error.get(k) for k in ("message", "type", "code")}}
            return batches.output_line(
                line_id=line_id, custom_id=item.custom_id, job_id=item.job_id,
                status_code=status, body=body,
            ), False  # fmt: skip
        reason = "expired" if final == BatchStatus.EXPIRED else "cancelled"
        if item.state is None:
            code, message = "job_deleted", "The job of this request no longer exists."
        else:
            code, message = batches.NOT_RUN[reason]
        return batches.error_line(
            line_id=line_id, custom_id=item.custom_id, code=code, message=message
        ), False

    async def _not_run(self, batch: BatchRecord, final: BatchStatus, out: _ResultFile) -> None:
        """Lines never turned into jobs (the batch was cancelled or expired first)."""
        reason = "expired" if final == BatchStatus.EXPIRED else "cancelled"
        code, message = batches.NOT_RUN[reason]
        seq = batch.expanded_chunks
        while True:
            chunks = await self.storage.file_chunks(
                file_id=batch.input_file_id, from_seq=seq, limit=4
            )
            for chunk in chunks:
                for offset, raw in enumerate(chunk.data.split(b"\n")[: chunk.line_count]):
                    custom_id = orjson.loads(raw)["custom_id"]
                    await out.add(
                        batches.error_line(
                            line_id=f"batch_req_{batch.id}_{chunk.first_line + offset}",
                            custom_id=custom_id,
                            code=code,
                            message=message,
                        )
                    )
            if len(chunks) < 4:
                return
            seq = chunks[-1].seq + 1

    # -- the loop -----------------------------------------------------------------------

    def request_stop(self) -> None:
        self._stopping = True
        self._wake.set()

    async def run(self) -> None:
        while not self._stopping:
            try:
                worked = await self.batches_once()
            except errors.StorageError as exc:
                log.warning("batches pass failed: %s", type(exc).__name__)
                worked = 0
            if not worked:
                await wait_for(self._wake, self.interval_s)


class _ResultFile:
    """An output or error file with an id derived from the batch: a pass that died while
    writing it leaves a partial file that the next pass replaces."""

    def __init__(self, runner: BatchRunner, batch: BatchRecord, kind: str) -> None:
        self.storage = runner.storage
        self.batch = batch
        self.file_id = f"file-{batch.id}-{kind}"
        self.filename = f"{batch.id}_{kind}.jsonl"
        self.writer = ChunkWriter(self.storage, self.file_id)
        self.lines = 0
        self.bytes = 0

    async def open(self) -> None:
        await self.storage.file_delete(file_id=self.file_id)
        await self.storage.file_create(
            file_id=self.file_id,
            tenant_id=self.batch.tenant_id,
            purpose="batch_output",
            filename=self.filename,
        )

    async def add(self, line: dict[str, Any]) -> None:
        raw = orjson.dumps(line) + b"\n"
        self.lines += 1
        self.bytes += len(raw)
        await self.writer.add(raw)

    async def close(self) -> str | None:
        """The file's id, or None (and no file) when it has no lines."""
        if not self.lines:
            await self.storage.file_delete(file_id=self.file_id)
            return None
        await self.writer.flush()
        await self.storage.file_finish(file_id=self.file_id, bytes=self.bytes, lines=self.lines)
        return self.file_id


def _item(line: int, custom_id: str, result: bulk_submit.ItemResult) -> NewBatchItem:
    if isinstance(result, SubmitOutcome):
        return NewBatchItem(line=line, custom_id=custom_id, job_id=result.job.id)
    error = {
        "message": result.message,
        "type": "invalid_request_error",
        "code": result.code,
        "param": getattr(result, "param", None),
        "status": 400,
    }
    return NewBatchItem(line=line, custom_id=custom_id, job_id=None, error=error)
