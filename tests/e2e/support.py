"""Shared pieces of the real-process tests: request bodies, an HTTP client for one API
process, tenant creation, and waiting for jobs to settle."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Sequence
from typing import Any

import httpx

from jobgate.clock import SystemClock
from jobgate.ids import RandomIds
from jobgate.services.tenants import TenantService
from jobgate.storage.postgres.store import PostgresStorage
from jobgate.testing import audit
from jobgate.testing.audit import JobFacts
from jobgate.testing.processes import wait_until

TERMINAL = audit.TERMINAL


def job_body(
    prompt: str = "hello", *, model: str = "sim-echo", **sim: Any
) -> dict[str, Any]:
    """A submit body for the simulated provider; `sim` keywords become body.sim directives."""
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": prompt}]}
    if sim:
        body["sim"] = sim
    return {"endpoint": "/v1/chat/completions", "body": body}


def create_tenant(dsn: str, name: str) -> str:
    """A tenant and its API key, created directly in the database (faster than the CLI)."""

    async def create() -> str:
        storage = PostgresStorage(dsn, pool_size=1)
        await storage.open()
        try:
            service = TenantService(storage=storage, ids=RandomIds(SystemClock()))
            return (await service.create(name)).api_key
        finally:
            await storage.close()

    return asyncio.run(create())


OPEN_CLIENTS: list[Api] = []  # closed after each test by the e2e conftest


class Api:
    """A small client for one (or, after a failover, another) API process."""

    def __init__(self, url: str, key: str) -> None:
        OPEN_CLIENTS.append(self)
        self.url = url
        self.key = key
        self.client = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30
        )

    def close(self) -> None:
        self.client.close()

    def submit(self, body: dict[str, Any] | None = None, **headers: str) -> str:
        response = self.client.post(
            "/v1/jobs", json=body or job_body(), headers=_header_names(headers)
        )
        assert response.status_code in (200, 202), response.text
        return str(response.json()["id"])

    def get(self, job_id: str) -> dict[str, Any]:
        response = self.client.get(f"/v1/jobs/{job_id}")
        assert response.status_code == 200, response.text
        data: dict[str, Any] = response.json()
        return data

    def events(self, job_id: str) -> list[dict[str, Any]]:
        response = self.client.get(f"/v1/jobs/{job_id}/events", params={"limit": 1000})
        assert response.status_code == 200, response.text
        return list(response.json()["data"])


def _header_names(headers: dict[str, str]) -> dict[str, str]:
    return {name.replace("_", "-"): value for name, value in headers.items()}


def wait_settled(
    url: str, job_ids: Sequence[str], *, timeout_s: float = 90.0
) -> dict[str, JobFacts]:
    """Wait until every job is terminal (read from the database); return their facts."""
    facts: dict[str, JobFacts] = {}

    def settled() -> bool:
        nonlocal facts
        facts = audit.job_facts(url, job_ids)
        return len(facts) == len(job_ids) and all(f.terminal for f in facts.values())

    try:
        wait_until(settled, timeout_s=timeout_s, interval_s=0.2, what="jobs to settle")
    except AssertionError:
        pending = {i: (f.state, f.events) for i, f in facts.items() if not f.terminal}
        raise AssertionError(f"jobs not settled: {pending}") from None
    return facts


def wait_state(url: str, job_id: str, states: Iterable[str], *, timeout_s: float = 60) -> JobFacts:
    wanted = set(states)

    def reached() -> JobFacts | None:
        job = audit.job_facts(url, [job_id]).get(job_id)
        return job if job is not None and job.state in wanted else None

    return wait_until(reached, timeout_s=timeout_s, interval_s=0.05, what=f"{job_id} in {wanted}")


def assert_completed_once(facts: dict[str, JobFacts], *, state: str = "succeeded") -> None:
    """Each job is in `state` with exactly one terminal event and, if it succeeded, exactly
    one usage ledger row."""
    for job in facts.values():
        assert job.state == state, (job.id, job.state, job.events)
        assert job.terminal_events == 1, (job.id, job.events)
        if state == "succeeded":
            assert job.ledger_rows == 1, (job.id, job.ledger_rows)


def monotonic_s() -> float:
    return time.monotonic()
