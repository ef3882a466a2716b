"""OpenAI-compatible files: a JSONL upload checked line by line and stored in chunks of whole
lines, never held whole in memory; list, read back in chunks, delete."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from jobgate import errors
from jobgate.config import Settings
from jobgate.domain import batches
from jobgate.ids import IdGenerator
from jobgate.storage.feature_protocol import FilesStore
from jobgate.storage.records import FileChunk, FileRecord

log = logging.getLogger(__name__)

CHUNK_BYTES = 256 * 1024  # a stored chunk holds whole lines, about this many bytes
PURPOSES = ("batch",)  # what a client may upload; jobgate writes `batch_output` itself
MAX_FILENAME = 255


class FileService:
    def __init__(self, *, storage: FilesStore, settings: Settings, ids: IdGenerator) -> None:
        self.storage = storage
        self.settings = settings
        self.ids = ids

    async def upload(
        self,
        *,
        tenant_id: str,
        purpose: Callable[[], str | None],
        filename: str,
        data: AsyncIterator[bytes],
    ) -> FileRecord:
        """Store a JSONL batch input, checking each line as it streams by (OpenAI's checks,
        `custom_id` unique, the size and line limits). A refused upload stores nothing.
        `purpose` is asked before and after the data (a form may send it after the file)."""
        early = purpose()
        if early is not None:
            _check_purpose(early)
        if not filename or len(filename) > MAX_FILENAME or "\x00" in filename:
            raise errors.InvalidRequest(
                "file must have a name of 1-255 characters, without NUL", param="file"
            )
        file_id = self.ids.new("file")
        await self.storage.file_create(
            file_id=file_id, tenant_id=tenant_id, purpose="batch", filename=filename
        )
        try:
            size, lines = await self._store_checked(file_id, data)
            _check_purpose(purpose())
        except BaseException:
            await self.storage.file_delete(file_id=file_id)
            raise
        record = await self.storage.file_finish(file_id=file_id, bytes=size, lines=lines)
        log.info("file stored", extra={"tenant_id": tenant_id, "file_id": file_id, "lines": lines})
        return record

    async def _store_checked(self, file_id: str, data: AsyncIterator[bytes]) -> tuple[int, int]:
        seen: set[str] = set()
        writer = ChunkWriter(self.storage, file_id)
        size = 0
        line_no = 0
        async for raw in split_lines(data, max_bytes=self.settings.files_max_bytes):
            size += len(raw)
            stripped = raw.rstrip(b"\r\n")
            if not stripped.strip():
                continue  # blank lines (a trailing newline included) carry nothing
            line_no += 1
            if line_no > self.settings.batch_max_lines:
                raise errors.InvalidRequest(
                    f"a batch file holds at most {self.settings.batch_max_lines} lines",
                    param="file",
                    code="too_many_lines",
                )
            try:
                line = batches.parse_line(stripped, line_no)
            except batches.LineError as exc:
                raise _refusal(exc) from None
            if line["custom_id"] in seen:
                raise _refusal(
                    batches.LineError(
                        line_no,
                        "duplicate_custom_id",
                        f"line {line_no}: custom_id {line['custom_id']!r} is used twice",
                        "custom_id",
                    )
                )
            seen.add(line["custom_id"])
            await writer.add(stripped + b"\n")
        if line_no == 0:
            raise errors.InvalidRequest("the file has no lines", param="file", code="empty_file")
        await writer.flush()
        return size, line_no

    async def get(self, *, tenant_id: str, file_id: str) -> FileRecord:
        record = await self.storage.file_get(file_id=file_id, tenant_id=tenant_id)
        if record is None:
            raise errors.NotFound("file", file_id)
        return record

    async def list(
        self, *, tenant_id: str, purpose: str | None, after: str | None, limit: int
    ) -> tuple[list[FileRecord], bool]:
        if after is not None:
            await self.get(tenant_id=tenant_id, file_id=after)
        found = await self.storage.file_list(
            tenant_id=tenant_id, purpose=purpose, after=after, limit=limit + 1
        )
        return found[:limit], len(found) > limit

    async def content(self, *, tenant_id: str, file_id: str) -> AsyncIterator[bytes]:
        """The file's bytes, one stored chunk at a time (checks ownership before the first)."""
        await self.get(tenant_id=tenant_id, file_id=file_id)
        return self.chunks(file_id)

    async def chunks(self, file_id: str) -> AsyncIterator[bytes]:
        seq = 0
        while True:
            page = await self.storage.file_chunks(file_id=file_id, from_seq=seq, limit=4)
            for chunk in page:
                yield chunk.data
            if len(page) < 4:
                return
            seq = page[-1].seq + 1

    async def delete(self, *, tenant_id: str, file_id: str) -> None:
        if not await self.storage.file_delete(file_id=file_id, tenant_id=tenant_id):
            raise errors.NotFound("file", file_id)


class ChunkWriter:
    """Gathers whole lines into chunks of about CHUNK_BYTES and stores each as it fills;
    `lease_token`: a batch's result file, each chunk fenced by the batch's lease."""

    def __init__(
        self, storage: FilesStore, file_id: str, *, lease_token: str | None = None
    ) -> None:
        self.storage = storage
        self.file_id = file_id
        self.lease_token = lease_token
        self.seq = 0
        self.first_line = 1
        self.lines: list[bytes] = []
        self.size = 0

    async def add(self, line: bytes) -> bool:
        """False when a fenced chunk was refused (the lease is lost; nothing stored)."""
        self.lines.append(line)
        self.size += len(line)
        if self.size >= CHUNK_BYTES:
            return await self.flush()
        return True

    async def flush(self) -> bool:
        """Store the lines gathered; False as `add`."""
        if not self.lines:
            return True
        chunk = FileChunk(
            seq=self.seq,
            first_line=self.first_line,
            line_count=len(self.lines),
            data=b"".join(self.lines),
        )
        stored = await self.storage.file_chunk_put(
            file_id=self.file_id, chunk=chunk, lease_token=self.lease_token
        )
        self.seq += 1
        self.first_line += len(self.lines)
        self.lines = []
        self.size = 0
        return stored


async def split_lines(data: AsyncIterator[bytes], *, max_bytes: int) -> AsyncIterator[bytes]:
    """Lines (each with its newline, the last maybe without) of a byte stream; raises
    errors.PayloadTooLarge past `max_bytes`, having read no more than one piece beyond it."""
    pending = b""
    total = 0
    async for piece in data:
        total += len(piece)
        if total > max_bytes:
            raise errors.PayloadTooLarge(max_bytes)
        pending += piece
        start = 0
        while (end := pending.find(b"\n", start)) != -1:
            yield pending[start : end + 1]
            start = end + 1
        pending = pending[start:]
    if pending:
        yield pending


def _check_purpose(purpose: str | None) -> None:
    if purpose not in PURPOSES:
        raise errors.InvalidRequest(
            f"purpose must be one of {', '.join(PURPOSES)}", param="purpose"
        )


def _refusal(exc: batches.LineError) -> errors.InvalidRequest:
    return errors.InvalidRequest(exc.message, param=exc.param, code=exc.code)


def file_view(record: FileRecord) -> dict[str, Any]:
    """A file as OpenAI shows it."""
    return {
        "id": record.id,
        "object": "file",
        "bytes": record.bytes,
        "created_at": int(record.created_at.timestamp()),
        "filename": record.filename,
        "purpose": record.purpose,
        "status": "processed",
        "expires_at": None,
        "status_details": None,
    }
