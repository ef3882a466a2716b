"""In-process fakes for client unit tests: a client on a fake clock, and job JSON builders."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import httpx

from jobgate.client import AsyncClient, Client

URL = "http://jobgate.test"
KEY = "jg_test"


def job_json(job_id: str = "job_1", status: str = "queued", **fields: Any) -> dict[str, Any]:
    return {
        "id": job_id,
        "object": "job",
        "status": status,
        "provider": "sim",
        "endpoint": "/v1/chat/completions",
        "model": "sim-echo",
        "created_at": 1_700_000_000,
        "attempt": 1,
        "max_attempts": 3,
        "priority": 5,
        "metadata": {},
        "dead_lettered": False,
        "purged": False,
        **fields,
    }


def problem(status: int, code: str, *, retry_after: int | None = None) -> httpx.Response:
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
    body = {
        "type": f"/problems/{code}",
        "title": code,
        "status": status,
        "detail": f"detail of {code}",
        "code": code,
        "error": {"message": f"detail of {code}", "type": "x", "code": code, "param": None},
    }
    return httpx.Response(
        status, json=body, headers={**headers, "Content-Type": "application/problem+json"}
    )


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class FakeTimeClient(Client):
    """A Client whose sleeps and monotonic clock are a FakeClock (no real waiting)."""

    def __init__(
        self, handler: Callable[[httpx.Request], httpx.Response], clock: FakeClock, **kw: Any
    ) -> None:
        kw.setdefault("rng", random.Random(7))
        super().__init__(URL, KEY, transport=httpx.MockTransport(handler), **kw)
        self.clock = clock

    def _sleep(self, seconds: float) -> None:
        self.clock.sleep(seconds)

    def _monotonic(self) -> float:
        return self.clock.now


class FakeTimeAsyncClient(AsyncClient):
    def __init__(
        self, handler: Callable[[httpx.Request], httpx.Response], clock: FakeClock, **kw: Any
    ) -> None:
        kw.setdefault("rng", random.Random(7))
        super().__init__(URL, KEY, transport=httpx.MockTransport(handler), **kw)
        self.clock = clock

    async def _sleep(self, seconds: float) -> None:
        self.clock.sleep(seconds)

    def _monotonic(self) -> float:
        return self.clock.now
