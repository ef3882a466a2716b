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
from jobgate.storage.postgres.store import postgres_store
from tests.support import audit
from tests.support.audit import JobFacts
from tests.support.processes import wait_until

TERMINAL = audit.TERMINAL


def job_body(prompt: str = "hello", *, model: str = "sim-echo", **sim: Any) -> dict[str, Any]:
    """A submit body for the simulated provider; `sim` keywords become body.sim directives."""
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": prompt}]}
    if sim:
        body["sim"] = sim
    return {"endpoint": "/v1/chat/completions", "body": body}


def create_tenant(dsn: str, name: str) -> str:
    """A tenant and its API key, created directly in the database (faster than the CLI)."""

    async def create() -> str:
        storage = postgres_store(dsn, pool_size=1)
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

    def __init__(self, url: str, key: str, *, close_after_test: bool = True) -> None:
        if close_after_test:
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


class Load:
    """Submits a job every `interval_s` from a background thread and records each answer:
    the ids of accepted jobs (2xx) and the status codes (or transport errors) of the rest."""

    def __init__(
        self,
        url: str | list[str],
        key: str,
        *,
        interval_s: float = 0.05,
        latency_s: float = 0.2,
    ) -> None:
        import threading

        # Several URLs: a client behind a load balancer that tries the next API when one
        # refuses the connection or answers 503 (a rolling restart).
        self.urls = [url] if isinstance(url, str) else list(url)
        self.key = key
        self.interval_s = interval_s
        self.latency_s = latency_s
        self.accepted: list[str] = []
        self.statuses: list[int | str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="load", daemon=True)

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=60)

    def count(self, status: int | str) -> int:
        return self.statuses.count(status)

    def _run(self) -> None:
        headers = {"Authorization": f"Bearer {self.key}"}
        with httpx.Client(headers=headers, timeout=15) as client:
            n = 0
            while not self._stop.is_set():
                n += 1
                body = job_body(f"load {n}", latency_s=self.latency_s)
                status: int | str = "no answer"
                for attempt in range(len(self.urls)):
                    url = self.urls[(n + attempt) % len(self.urls)]
                    try:
                        response = client.post(f"{url}/v1/jobs", json=body)
                    except httpx.TransportError as exc:
                        status = type(exc).__name__
                        continue
                    status = response.status_code
                    if status in (200, 202):
                        self.accepted.append(response.json()["id"])
                        break
                    if status == 503 and not response.headers.get("Retry-After"):
                        status = "503 without Retry-After"
                    if status != 503:
                        break
                self.statuses.append(status)
                self._stop.wait(self.interval_s)
