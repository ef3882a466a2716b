"""http.json_response builds its answers directly (not through Starlette's general path): each
one equals, attribute for attribute, the `Response` Starlette would build, and is sent alike."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from starlette.responses import Response

from jobgate.http.json_response import JsonResponse, json_response

CASES: list[tuple[Any, int, dict[str, str] | None]] = [
    ({"id": "job_1", "status": "queued", "n": [1, None, "é"]}, 200, None),
    ({"id": "job_1"}, 202, {"Retry-After": "2", "Location": "/v1/jobs/job_1"}),
    ({"status": "unavailable"}, 503, {"Retry-After": "5"}),
    ([], 201, {}),
    ({"a": 1}, 200, {"Content-Type": "application/problem+json"}),  # Starlette's path
    ({"a": 1}, 200, {"content-length": "7"}),
    (None, 204, None),
    (None, 304, {"ETag": "x"}),
    ({"a": 1}, 101, None),
]


def starlettes(body: Any, status_code: int, headers: dict[str, str] | None) -> Response:
    return Response(
        orjson.dumps(body), status_code=status_code, media_type="application/json", headers=headers
    )


@pytest.mark.parametrize(("body", "status_code", "headers"), CASES)
def test_an_answer_equals_starlettes(
    body: Any, status_code: int, headers: dict[str, str] | None
) -> None:
    ours = json_response(body, status_code, headers)
    assert vars(ours) == vars(starlettes(body, status_code, headers))
    assert ours.headers.items() == starlettes(body, status_code, headers).headers.items()


def test_the_usual_answers_take_the_direct_path() -> None:
    assert type(json_response({"a": 1})) is JsonResponse
    assert type(json_response({"a": 1}, 202, {"Retry-After": "1"})) is JsonResponse
    assert type(json_response({"a": 1}, 204)) is Response


async def test_it_is_sent_as_starlettes() -> None:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        raise AssertionError("not read")

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": "/"}
    await json_response({"a": 1}, 202, {"Retry-After": "1"})(scope, receive, send)
    ours = list(sent)
    sent.clear()
    await starlettes({"a": 1}, 202, {"Retry-After": "1"})(scope, receive, send)
    assert ours == sent
