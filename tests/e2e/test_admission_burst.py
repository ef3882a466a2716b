"""A burst of concurrent `POST /v1/jobs` against `max_queued = 5`, spread over two real API
processes on one database: exactly five are accepted (202), every other answer is 429 with a
Retry-After, never a 5xx. Both backends."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from tests.support.processes import ProcessHarness

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

BURST = 300
BODY = {
    "endpoint": "/v1/chat/completions",
    "body": {"model": "sim-echo", "messages": [{"role": "user", "content": "hi"}]},
}


async def _burst(urls: list[str], key: str) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=100)
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(headers=headers, timeout=60, limits=limits) as http:
        return await asyncio.gather(
            *(http.post(f"{urls[n % len(urls)]}/v1/jobs", json=BODY) for n in range(BURST))
        )


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_a_burst_of_submits_admits_exactly_max_queued(
    harness: ProcessHarness, tmp_path: Path, request: pytest.FixtureRequest, backend: str
) -> None:
    url = (
        f"sqlite:///{tmp_path / 'jobgate.db'}"
        if backend == "sqlite"
        else request.getfixturevalue("pg_dsn")
    )
    harness.env["JOBGATE_DATABASE_URL"] = url
    key = harness.create_tenant("acme")
    harness.run("tenants", "set", "acme", "--max-queued", "5")
    apis = [harness.start("api") for _ in range(2)]  # no worker: nothing drains the queue
    answers = asyncio.run(_burst([api.url or "" for api in apis], key))
    codes = [answer.status_code for answer in answers]
    assert codes.count(202) == 5, sorted(set(codes))
    assert codes.count(429) == BURST - 5
    assert all(1 <= int(a.headers["retry-after"]) <= 120 for a in answers if a.status_code == 429)
    assert all(api.alive for api in apis)
