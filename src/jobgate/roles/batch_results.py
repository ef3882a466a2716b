"""A finalizing batch's output and error files, and its end (for the batches role): the lines
that ran as jobs and those sent in provider batches (read back by services/provider_batch_poll),
in the input's order, each once.

Each pass writes its files under new ids, invisible while written (`uploading`, naming the
batch), every write fenced by the pass's lease token; the batch then ends in one transaction
that names the files and makes them visible (storage `batch_finish`). A pass killed while
writing leaves the batch's old state whole (its unfinished files are deleted when the batch
ends), and a pass that lost its lease stops at its next write: no batch ever ends without its
files, and no finished batch's file is touched again."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

import orjson

from jobgate.domain import responses
from jobgate.domain.states import JobState
from jobgate.ids import IdGenerator
from jobgate.services.files import ChunkWriter
from jobgate.storage import protocol
from jobgate.storage.records import BatchEnding, BatchItemResult, BatchRecord, ResultFile
from jobgate.wire import openai_batches as batches
from jobgate.wire.openai_batches import BatchStatus

log = logging.getLogger(__name__)

PAGE = 500
# How a line ended, as counted in request_counts.
_SUCCEEDED, _FAILED, _NOT_RUN = "succeeded", "failed", "not_run"


class LeaseLost(Exception):
    """A fenced write for a batch matched nothing: another pass holds the batch now."""


async def finalize(
    storage: protocol.BatchRunnerStorage,
    ids: IdGenerator,
    batch: BatchRecord,
    now: datetime | None,
    *,
    expires_after_s: float,
) -> None:
    """Write the batch's files (each expiring `expires_after_s` after) and end it (raises
    LeaseLost once another pass holds it)."""
    assert batch.lease_token is not None
    final = BatchStatus(batch.final_status or BatchStatus.COMPLETED)
    output = _ResultFile(storage, ids, batch, "output", expires_after_s)
    failures = _ResultFile(storage, ids, batch, "error", expires_after_s)
    counted = {_SUCCEEDED: 0, _FAILED: 0, _NOT_RUN: 0}
    after = -1
    while True:
        page = await storage.batch_items_page(batch_id=batch.id, after_line=after, limit=PAGE)
        for item in page:
            line, outcome = await _result_line(storage, batch, item, final)
            await (output if outcome == _SUCCEEDED else failures).add(line)
            counted[outcome] += 1
        if len(page) < PAGE:
            break
        after = page[-1].line
    if batch.in_progress_at is not None:  # validated: every line not expanded is accounted
        await _not_run(storage, batch, final, failures)
    counts = await storage.batch_counts(batch_id=batch.id)
    ending = BatchEnding(
        batch_id=batch.id,
        tenant_id=batch.tenant_id,
        lease_token=batch.lease_token,
        status=final,
        # Lines cancelled or expired before they ran count as neither (as OpenAI counts).
        completed_count=counted[_SUCCEEDED],
        failed_count=counted[_FAILED],
        output=await output.close(),
        error=await failures.close(),
        usage=batches.usage_view(counts.input_tokens, counts.output_tokens, counts.cached_tokens),
    )
    done = await storage.batch_finish(ending=ending, now=now)
    if done is None:
        raise LeaseLost(batch.id)
    log.info(
        "batch finished",
        extra={"batch_id": batch.id, "to_state": str(final), "count": counted[_SUCCEEDED]},
    )


async def _result_line(
    storage: protocol.BatchRunnerStorage,
    batch: BatchRecord,
    item: BatchItemResult,
    final: BatchStatus,
) -> tuple[dict[str, Any], str]:
    """A line's entry in the output or error file, and how it ended (_SUCCEEDED, _FAILED or
    _NOT_RUN: cancelled or expired before it ran)."""
    line_id = f"batch_req_{item.job_id or f'{batch.id}_{item.line}'}"
    if item.provider is not None:
        return _native_line(batch, item, final, line_id)
    if item.job_id is None:  # refused when expanded, as its route would have answered
        error = item.item_error or {}
        return batches.output_line(
            line_id=line_id,
            custom_id=item.custom_id,
            job_id=f"{batch.id}_{item.line}",
            status_code=int(error.get("status", 400)),
            body={"error": {k: error.get(k) for k in ("message", "type", "code", "param")}},
        ), _FAILED
    if item.state == JobState.SUCCEEDED:
        body = item.result
        if batch.endpoint == responses.ENDPOINT:
            job = await storage.job_get(job_id=item.job_id)
            body = responses.render(job) if job is not None else body
        return batches.output_line(
            line_id=line_id, custom_id=item.custom_id, job_id=item.job_id,
            status_code=200, body=body,
        ), _SUCCEEDED  # fmt: skip
    if item.state == JobState.FAILED:
        error = item.error or {}
        status = batches.failed_status_code(error) or 500
        body = {"error": {k: error.get(k) for k in ("message", "type", "code")}}
        return batches.output_line(
            line_id=line_id, custom_id=item.custom_id, job_id=item.job_id,
            status_code=status, body=body,
        ), _FAILED  # fmt: skip
    if item.state is None:  # the job row is gone: its outcome is unknown
        return batches.error_line(
            line_id=line_id,
            custom_id=item.custom_id,
            code="job_deleted",
            message="The job of this request no longer exists.",
        ), _FAILED
    code, message = batches.NOT_RUN["expired" if final == BatchStatus.EXPIRED else "cancelled"]
    return batches.error_line(
        line_id=line_id, custom_id=item.custom_id, code=code, message=message
    ), _NOT_RUN


def _native_line(
    batch: BatchRecord, item: BatchItemResult, final: BatchStatus, line_id: str
) -> tuple[dict[str, Any], str]:
    """A line sent in a provider batch: the provider's output or error line with the caller's
    custom_id, or, where its part never ended (the batch was cancelled or expired before it
    was sent), an error line saying so."""
    outcome = {"succeeded": _SUCCEEDED, "failed": _FAILED}.get(item.outcome or "", _NOT_RUN)
    if item.result_line is not None:
        kept = item.result_line
        line = {
            "id": kept.get("id", line_id),
            "custom_id": item.custom_id,
            "response": kept.get("response"),
            "error": kept.get("error"),
        }
        return line, outcome
    code, message = batches.NOT_RUN["expired" if final == BatchStatus.EXPIRED else "cancelled"]
    return batches.error_line(
        line_id=line_id, custom_id=item.custom_id, code=code, message=message
    ), _NOT_RUN


async def _not_run(
    storage: protocol.BatchRunnerStorage,
    batch: BatchRecord,
    final: BatchStatus,
    out: _ResultFile,
) -> None:
    """Lines never turned into jobs (the batch was cancelled or expired first)."""
    reason = "expired" if final == BatchStatus.EXPIRED else "cancelled"
    code, message = batches.NOT_RUN[reason]
    seq = batch.expanded_chunks
    while True:
        chunks = await storage.file_chunks(file_id=batch.input_file_id, from_seq=seq, limit=4)
        for chunk in chunks:
            for number, raw in batches.chunk_lines(chunk.data, chunk.first_line):
                await out.add(
                    batches.error_line(
                        line_id=f"batch_req_{batch.id}_{number}",
                        custom_id=orjson.loads(raw)["custom_id"],  # validated: it has one
                        code=code,
                        message=message,
                    )
                )
        if len(chunks) < 4:
            return
        seq = chunks[-1].seq + 1


class _ResultFile:
    """An output or error file of one pass: a new id, created (invisible, naming the batch)
    at its first line, each chunk fenced by the pass's lease token."""

    def __init__(
        self,
        storage: protocol.BatchRunnerStorage,
        ids: IdGenerator,
        batch: BatchRecord,
        kind: str,
        expires_after_s: float,
    ) -> None:
        self.storage = storage
        self.batch = batch
        self.expires_after_s = expires_after_s
        self.file_id = ids.new("file")
        self.filename = f"{batch.id}_{kind}.jsonl"
        self.writer = ChunkWriter(storage, self.file_id, lease_token=batch.lease_token)
        self.lines = 0
        self.bytes = 0

    async def add(self, line: dict[str, Any]) -> None:
        if not self.lines:
            created = await self.storage.file_create(
                file_id=self.file_id,
                tenant_id=self.batch.tenant_id,
                purpose="batch_output",
                filename=self.filename,
                expires_after_s=self.expires_after_s,
                batch_id=self.batch.id,
                lease_token=self.batch.lease_token,
            )
            if not created:
                raise LeaseLost(self.batch.id)
        raw = orjson.dumps(line) + b"\n"
        self.lines += 1
        self.bytes += len(raw)
        if not await self.writer.add(raw):
            raise LeaseLost(self.batch.id)

    async def close(self) -> ResultFile | None:
        """The file as written (its last chunk stored), or None when it has no lines."""
        if not self.lines:
            return None
        if not await self.writer.flush():
            raise LeaseLost(self.batch.id)
        return ResultFile(self.file_id, self.bytes, self.lines)
