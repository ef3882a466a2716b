"""A whole jobgate (API, worker, reconciler) in this process, against the provider simulator
server, both on real sockets: for the background-mode scenarios that need webhooks to travel."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

from jobgate.config import ProviderConfig, Settings
from jobgate.process.runtime import Runtime
from jobgate.simulator.server import Simulator
from jobgate.testing.waiting import eventually as eventually  # the e2e tests' import

WEBHOOK_SECRET = "whsec_" + "ZTJlLXdlYmhvb2stc2VjcmV0LWZvci10ZXN0cw=="
SECRET_ENV = "JOBGATE_TEST_PROVIDER_WEBHOOK_SECRET"
TERMINAL = {"succeeded", "failed", "cancelled", "expired"}


@dataclasses.dataclass
class Gateway:
    runtime: Runtime
    simulator: Simulator
    client: httpx.AsyncClient

    async def submit(self, sim: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
        body: dict[str, Any] = {"model": "gpt-4.1-mini", "input": "tell me later"}
        if sim:
            body["sim"] = sim
        answer = await self.client.post(
            "/v1/jobs",
            json={"provider": "upstream", "endpoint": "/v1/responses", "body": body, **fields},
        )
        assert answer.status_code == 202, answer.text
        return answer.json()  # type: ignore[no-any-return]

    async def job(self, job_id: str) -> dict[str, Any]:
        answer = await self.client.get(f"/v1/jobs/{job_id}")
        assert answer.status_code == 200, answer.text
        return answer.json()  # type: ignore[no-any-return]

    async def until(self, job_id: str, check: Any, *, timeout_s: float = 30) -> dict[str, Any]:
        """Poll until `check(job)` holds (generous deadline: the machine is shared)."""
        async with asyncio.timeout(timeout_s):
            while True:
                job = await self.job(job_id)
                if check(job):
                    return job
                await asyncio.sleep(0.05)

    async def terminal(self, job_id: str, *, timeout_s: float = 30) -> dict[str, Any]:
        return await self.until(job_id, lambda j: j["status"] in TERMINAL, timeout_s=timeout_s)

    async def events(self, job_id: str) -> list[dict[str, Any]]:
        answer = await self.client.get(f"/v1/jobs/{job_id}/events")
        return answer.json()["data"]  # type: ignore[no-any-return]


@contextlib.asynccontextmanager
async def gateway(
    tmp_path: Path,
    *,
    roles: tuple[str, ...] = ("api", "worker", "reconciler"),
    database_url: str | None = None,
    **provider: Any,
) -> AsyncIterator[Gateway]:
    # A test that says the provider deduplicates creates gets a simulator that really does;
    # every other one gets the realistic simulator (neither OpenAI nor Anthropic does).
    dedupes = bool(provider.get("idempotent_creates"))
    async with Simulator(webhook_secret=WEBHOOK_SECRET, idempotent=dedupes) as simulator:
        config = {
            "kind": "openai",
            "base_url": simulator.openai_base_url,
            "mode": "background",
            "webhook_secret_env": SECRET_ENV,
            "reconcile_after_s": 3600.0,  # the sweep is the slow path; most tests want webhooks
            **provider,
        }
        settings = Settings(
            database_url=database_url or f"sqlite:///{tmp_path / 'jobgate.db'}",
            providers={"upstream": ProviderConfig(**config)},
            reconciler_interval_s=0.2,
            worker_poll_interval_s=0.1,
            shutdown_grace_s=1,
        )
        runtime = Runtime(settings)
        await runtime.open()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        port = sock.getsockname()[1]
        simulator.webhook_url = f"http://127.0.0.1:{port}/v1/provider_webhooks/upstream"
        issued = await runtime.tenants.create("acme")
        stop = asyncio.Event()
        task = asyncio.create_task(runtime.run_roles(roles, stop, sock=sock))
        try:
            async with httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{port}",
                headers={"authorization": f"Bearer {issued.api_key}"},
                timeout=30,
            ) as client:
                async with asyncio.timeout(10):
                    while True:
                        with contextlib.suppress(httpx.TransportError):
                            if (await client.get("/healthz")).status_code == 200:
                                break
                        await asyncio.sleep(0.05)
                yield Gateway(runtime, simulator, client)
        finally:
            stop.set()
            await task
            sock.close()
            await runtime.close()
