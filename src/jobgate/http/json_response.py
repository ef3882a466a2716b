"""The JSON answer every API route sends: orjson-encoded, no second serialisation pass."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response


def json_response(
    body: Any, status_code: int = 200, headers: dict[str, str] | None = None
) -> Response:
    return Response(
        orjson.dumps(body), status_code=status_code, media_type="application/json", headers=headers
    )
