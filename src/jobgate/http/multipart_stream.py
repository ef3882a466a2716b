"""A multipart/form-data body read as it arrives: the file part's bytes are handed on piece
by piece (never buffered whole, never spooled to disk); small text fields are kept."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import ClientDisconnect

from jobgate import errors

MAX_FIELD_BYTES = 1024  # a text field (purpose) is short


@dataclasses.dataclass
class Upload:
    """What `stream_upload` saw: the text fields and the file part's name."""

    fields: dict[str, str] = dataclasses.field(default_factory=dict)
    filename: str | None = None
    file_seen: bool = False


class _State:
    def __init__(self, file_field: str, upload: Upload) -> None:
        self.file_field = file_field
        self.upload = upload
        self.header_field = b""
        self.header_value = b""
        self.headers: dict[bytes, bytes] = {}
        self.name: str | None = None
        self.in_file = False
        self.text = bytearray()
        self.out: list[bytes] = []  # file bytes parsed from the current network piece

    def callbacks(self) -> dict[str, Any]:
        return {
            "on_part_begin": self.part_begin,
            "on_header_field": self.header_field_data,
            "on_header_value": self.header_value_data,
            "on_header_end": self.header_end,
            "on_headers_finished": self.headers_finished,
            "on_part_data": self.part_data,
            "on_part_end": self.part_end,
        }

    def part_begin(self) -> None:
        self.headers = {}
        self.name = None
        self.in_file = False
        self.text = bytearray()

    def header_field_data(self, data: bytes, start: int, end: int) -> None:
        self.header_field += data[start:end]

    def header_value_data(self, data: bytes, start: int, end: int) -> None:
        self.header_value += data[start:end]

    def header_end(self) -> None:
        self.headers[self.header_field.lower()] = self.header_value
        self.header_field = b""
        self.header_value = b""

    def headers_finished(self) -> None:
        _, options = parse_options_header(self.headers.get(b"content-disposition", b""))
        self.name = options.get(b"name", b"").decode("utf-8", "replace")
        if self.name == self.file_field:
            if self.upload.file_seen:
                raise errors.InvalidRequest("send one file", param=self.file_field)
            self.in_file = True
            self.upload.file_seen = True
            self.upload.filename = options.get(b"filename", b"").decode("utf-8", "replace")

    def part_data(self, data: bytes, start: int, end: int) -> None:
        if self.in_file:
            self.out.append(data[start:end])
            return
        self.text += data[start:end]
        if len(self.text) > MAX_FIELD_BYTES:
            raise errors.InvalidRequest(f"field {self.name!r} is too long", param=self.name)

    def part_end(self) -> None:
        if not self.in_file and self.name:
            self.upload.fields[self.name] = self.text.decode("utf-8", "replace")


def boundary_of(content_type: str) -> bytes:
    kind, options = parse_options_header(content_type)
    if kind != b"multipart/form-data" or not options.get(b"boundary"):
        raise errors.InvalidRequest(
            "send the file as multipart/form-data", param="file", code="invalid_content_type"
        )
    return options[b"boundary"]


async def stream_upload(
    body: AsyncIterator[bytes], *, content_type: str, upload: Upload, file_field: str = "file"
) -> AsyncIterator[bytes]:
    """The bytes of the `file_field` part as they arrive; fields land in `upload` as parsed
    (a field sent after the file is known only once this is exhausted)."""
    state = _State(file_field, upload)
    parser = MultipartParser(boundary_of(content_type), state.callbacks())  # type: ignore[arg-type]
    pieces = aiter(body)
    while True:
        try:
            piece = await anext(pieces)
        except StopAsyncIteration:
            break
        except ClientDisconnect:  # or the body limit cut it off (that answer is a 413)
            raise errors.InvalidRequest("the upload was interrupted", param="file") from None
        try:
            parser.write(piece)
        except errors.JobgateError:
            raise
        except Exception as exc:  # the parser's own errors: a malformed body
            raise errors.InvalidRequest(f"malformed multipart body: {exc}", param="file") from None
        for data in state.out:
            yield data
        state.out.clear()
    parser.finalize()
    for data in state.out:
        yield data
