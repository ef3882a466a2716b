"""OpenAI-compatible files: a JSONL upload stored as it arrives, byte for byte, in chunks of
whole lines (never held whole in memory); list, read back in chunks, delete. A batch checks
its input's lines when it is validated (roles/batch_runner.py), as OpenAI does."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from jobgate import errors
from jobgate.config import Settings
from jobgate.ids import IdGenerator
from jobgate.storage.feature_protocol import FilesStore
from jobgate.storage.records import FileChunk, FileRecord

log = logging.getLogger(__name__)

CHUNK_BYTES = 256 * 1024  # a stored chunk holds whole lines, about this many bytes
PURPOSES = ("batch",)  # what a client may upload; jobgate writes `batch_output` itself
MAX_FILENAME = 255
EXTENSION = ".jsonl"  # a batch input's name, as OpenAI requires it


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
        """Store a JSONL batch input as it streams by, byte for byte: any well-formed upload
        of a `.jsonl` file within the size limits (a line within the request body limit) and
        the tenant's room. Its lines are checked when a batch is validated. A refused upload
        stores nothing. `purpose` is asked before and after the data (a form may send it
        after the file)."""
        early = purpose()
        if early is not None:
            _check_purpose(early)
        _check_filename(filename)
        room = await self._room(tenant_id)
        file_id = self.ids.new("file")
        await self.storage.file_create(
            file_id=file_id,
            tenant_id=tenant_id,
            purpose="batch",
            filename=filename,
            expires_after_s=self.settings.files_expire_after_s,
        )
        try:
            size, lines = await self._store(file_id, data, room)
            _check_purpose(purpose())
        except BaseException:
            await self.storage.file_delete(file_id=file_id)
            raise
        record = await self.storage.file_finish(file_id=file_id, bytes=size, lines=lines)
        log.info("file stored", extra={"tenant_id": tenant_id, "file_id": file_id, "lines": lines})
        return record

    async def _room(self, tenant_id: str) -> int:
        """The bytes the tenant may still upload; errors.LimitExceeded when it keeps as many
        files, or bytes, as it may. (Uploads that run at the same moment are each checked
        against what was kept when they began.)"""
        usage = await self.storage.file_usage(tenant_id=tenant_id)
        if usage.files >= self.settings.files_max_per_tenant:
            raise errors.LimitExceeded(
                "files_max_per_tenant",
                f"this tenant keeps {usage.files} files, the most it may "
                f"(files_max_per_tenant); delete some first",
            )
        room = self.settings.files_max_bytes_per_tenant - usage.bytes
        if room <= 0:
            raise _no_room(self.settings.files_max_bytes_per_tenant)
        return room

    async def _store(self, file_id: str, data: AsyncIterator[bytes], room: int) -> tuple[int, int]:
        """Store the upload's lines as sent; (its bytes, its requests: lines not blank)."""
        writer = ChunkWriter(self.storage, file_id)
        size = 0
        requests = 0
        lines = split_lines(
            data,
            max_bytes=self.settings.files_max_bytes,
            max_line_bytes=self.settings.max_body_bytes,
        )
        async for raw in lines:
            size += len(raw)
            if size > room:
                raise _no_room(self.settings.files_max_bytes_per_tenant)
            if raw.strip():
                requests += 1
            await writer.add(raw)
        await writer.flush()
        return size, requests

    async def get(self, *, tenant_id: str, file_id: str) -> FileRecord:
        record = await self.storage.file_get(file_id=file_id, tenant_id=tenant_id)
        if record is None:
            raise errors.NotFound("file", file_id)
        return record

    async def list(
        self,
        *,
        tenant_id: str,
        purpose: str | None,
        after: str | None,
        limit: int,
        oldest_first: bool = False,
    ) -> tuple[list[FileRecord], bool]:
        if after is not None:
            await self.get(tenant_id=tenant_id, file_id=after)
        found = await self.storage.file_list(
            tenant_id=tenant_id,
            purpose=purpose,
            after=after,
            limit=limit + 1,
            oldest_first=oldest_first,
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
        """Delete the tenant's file; errors.Conflict while a batch that has not ended reads
        it (delete it once the batch ends)."""
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


async def split_lines(
    data: AsyncIterator[bytes], *, max_bytes: int, max_line_bytes: int | None = None
) -> AsyncIterator[bytes]:
    """The lines of a byte stream, each with its newline (the last maybe without), in time
    linear in its size: each piece is searched once, a line's bytes gathered once. Raises
    errors.PayloadTooLarge past `max_bytes` in all, or at a line longer than `max_line_bytes`
    (having read no more than one piece beyond either)."""
    pending = bytearray()
    total = 0
    number = 1
    async for piece in data:
        total += len(piece)
        if total > max_bytes:
            raise errors.PayloadTooLarge(max_bytes)
        start = 0
        while (end := piece.find(b"\n", start)) != -1:
            pending += piece[start : end + 1]
            _check_line(pending, number, max_line_bytes)
            yield bytes(pending)
            pending.clear()
            number += 1
            start = end + 1
        pending += piece[start:]
        _check_line(pending, number, max_line_bytes)
    if pending:
        yield bytes(pending)


def _check_line(line: bytearray, number: int, max_line_bytes: int | None) -> None:
    if max_line_bytes is not None and len(line.rstrip(b"\r\n")) > max_line_bytes:
        refused = errors.PayloadTooLarge(max_line_bytes)
        refused.message = (
            f"line {number} is longer than {max_line_bytes} bytes, the limit of one request "
            "(max_body_bytes)"
        )
        refused.args = (refused.message,)
        refused.param = "file"
        raise refused


def _check_purpose(purpose: str | None) -> None:
    if purpose not in PURPOSES:
        raise errors.InvalidRequest(
            f"purpose must be one of {', '.join(PURPOSES)}", param="purpose"
        )


def _check_filename(filename: str) -> None:
    if not filename or len(filename) > MAX_FILENAME or "\x00" in filename:
        raise errors.InvalidRequest(  # PostgreSQL's text cannot hold a NUL
            "file must have a name of 1-255 characters, without NUL", param="file"
        )
    if not filename.lower().endswith(EXTENSION):
        raise errors.InvalidRequest(
            f"a batch input file must be JSONL, named *{EXTENSION} (got {filename[:100]!r})",
            param="file",
            code="invalid_file_format",
        )


def _no_room(max_bytes: int) -> errors.LimitExceeded:
    return errors.LimitExceeded(
        "files_max_bytes_per_tenant",
        f"this tenant's files would hold more than {max_bytes} bytes "
        "(files_max_bytes_per_tenant); delete some first",
    )


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
        "expires_at": None if record.expires_at is None else int(record.expires_at.timestamp()),
        "status_details": None,
    }
