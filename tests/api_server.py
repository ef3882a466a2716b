"""A real HTTP server (uvicorn on 127.0.0.1, port 0) in the test's event loop: the `api`
fixture, registered for every test folder by tests/conftest.py."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
from collections.abc import AsyncIterator

import httpx
import pytest

from jobgate.process.runtime import Runtime


@dataclasses.dataclass
class Api:
    url: str
    runtime: Runtime
    http: httpx.AsyncClient

    async def key(self, tenant: str) -> str:
        return (await self.runtime.tenants.create(tenant)).api_key


@pytest.fixture
async def api(runtime: Runtime) -> AsyncIterator[Api]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    stop = asyncio.Event()
    serving = asyncio.create_task(runtime.run_roles(("api",), stop, sock=sock))
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        # Up when it answers: a deadline for a loaded machine (200 tries of 20 ms gave up
        # after ~4 s and let the test run against a server still starting).
        async with asyncio.timeout(60):
            while True:
                try:
                    if (await http.get("/healthz")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.02)
        yield Api(url, runtime, http)
    stop.set()
    await asyncio.wait_for(serving, 15)
    sock.close()
