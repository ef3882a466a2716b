"""The JSON answer every API route sends: orjson-encoded, no second serialisation pass.

Its headers are built here in the order Starlette's `Response` builds them (the caller's, then
content-length, then content-type), without its general path (rendering checks, header lookups,
a charset check), which costs a measurable share of every status read and submit. Unusual
answers (no body allowed, or a caller naming those headers) are built by Starlette itself.
tests/http/test_json_response.py holds both equal.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response

_MEDIA_TYPE = "application/json"
_CONTENT_TYPE = (b"content-type", _MEDIA_TYPE.encode("latin-1"))
_BODY_HEADERS = (b"content-length", b"content-type")


class JsonResponse(Response):
    """A Starlette `Response` given its body and raw headers ready-made."""

    def __init__(
        self, body: bytes, status_code: int, raw_headers: list[tuple[bytes, bytes]]
    ) -> None:
        self.status_code = status_code
        self.media_type = _MEDIA_TYPE
        self.background = None
        self.body = body
        self.raw_headers = raw_headers


def json_response(
    body: Any, status_code: int = 200, headers: dict[str, str] | None = None
) -> Response:
    content = orjson.dumps(body)
    raw: list[tuple[bytes, bytes]] = []
    if headers:
        raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
        if any(name in _BODY_HEADERS for name, _ in raw):
            return _starlettes(content, status_code, headers)
    if status_code < 200 or status_code in (204, 304):
        return _starlettes(content, status_code, headers)
    raw.append((b"content-length", b"%d" % len(content)))
    raw.append(_CONTENT_TYPE)
    return JsonResponse(content, status_code, raw)


def _starlettes(content: bytes, status_code: int, headers: dict[str, str] | None) -> Response:
    return Response(content, status_code=status_code, media_type=_MEDIA_TYPE, headers=headers)
