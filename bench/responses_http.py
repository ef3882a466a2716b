"""`python -m bench.responses_http [--backend sqlite|postgres] [--requests N] [--rounds R]`: the
API process's CPU per request of the two Responses routes OpenAI SDK clients call most (create
a background response, retrieve it) beside the native routes they mirror (submit, status
read), on one `jobgate api` process (PostgreSQL) or `jobgate serve --roles api` (SQLite), no
worker. A closed loop of 32 requests at once from this process (httpx); the routes alternate
round by round, so the machine's drift touches all four alike. On demand, not part of
`python -m bench`: the figures are per request, not a rate (the client, not the server, limits
the rate here).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

from bench import pg, procs
from bench.jobgate_setup import new_tenant, open_runtime

AT_ONCE = 32
NATIVE_SUBMIT = {
    "endpoint": "/v1/chat/completions",
    "body": {"model": "sim-echo", "messages": [{"role": "user", "content": "hi"}]},
}
BACKGROUND_CREATE = {"model": "sim-echo", "input": "hi", "background": True}


@contextlib.asynccontextmanager
async def api_server(backend: str, workdir: Path) -> AsyncIterator[tuple[procs.Proc, str, str]]:
    """A jobgate API process (no worker), its base URL and an API key."""
    async with contextlib.AsyncExitStack() as stack:
        if backend == "postgres":
            url = await stack.enter_async_context(pg.fresh("responses"))
            args = ["api", "--port", "0"]
        else:
            url = f"sqlite:///{workdir / 'jobgate.db'}"
            args = ["serve", "--roles", "api", "--port", "0"]
        runtime = await open_runtime(url)
        try:
            _, api_key = await new_tenant(runtime)
        finally:
            await runtime.close()
        server = procs.start_jobgate(
            f"responses-{backend}",
            args,
            env=procs.jobgate_env(url, workdir),
            workdir=workdir,
            log_dir=workdir / "logs",
        )
        try:
            base_url = await asyncio.to_thread(procs.wait_listening, server)
            yield server, base_url, api_key
        finally:
            await asyncio.to_thread(server.stop)


async def cpu_per_request(
    http: httpx.AsyncClient, server: procs.Proc, requests: int, method: str, path: str, body: Any
) -> float:
    """Microseconds of the server's CPU per request, `requests` of them, AT_ONCE at a time."""
    gate = asyncio.Semaphore(AT_ONCE)

    async def one() -> None:
        async with gate:
            answer = await http.request(method, path, json=body)
            if answer.status_code not in (200, 202):
                raise RuntimeError(f"{method} {path}: {answer.status_code} {answer.text[:200]}")

    before = procs.cpu_seconds(server.pid)
    await asyncio.gather(*(one() for _ in range(requests)))
    return (procs.cpu_seconds(server.pid) - before) / requests * 1e6


async def measure(backend: str, requests: int, rounds: int) -> dict[str, list[float]]:
    workdir = Path(tempfile.mkdtemp(prefix="jobgate-responses-"))
    async with api_server(backend, workdir) as (server, base_url, api_key):
        headers = {"Authorization": f"Bearer {api_key}"}
        limits = httpx.Limits(max_connections=AT_ONCE)
        async with httpx.AsyncClient(base_url=base_url, headers=headers, limits=limits) as http:
            job = (await http.post("/v1/jobs", json=NATIVE_SUBMIT)).json()["id"]
            response = (await http.post("/v1/responses", json=BACKGROUND_CREATE)).json()["id"]
            routes: dict[str, tuple[str, str, Any]] = {
                "POST /v1/jobs": ("POST", "/v1/jobs", NATIVE_SUBMIT),
                "POST /v1/responses (background)": ("POST", "/v1/responses", BACKGROUND_CREATE),
                "GET /v1/jobs/{id}": ("GET", f"/v1/jobs/{job}", None),
                "GET /v1/responses/{id}": ("GET", f"/v1/responses/{response}", None),
            }
            figures: dict[str, list[float]] = {name: [] for name in routes}
            for round_ in range(rounds + 1):  # the first round warms up, uncounted
                order = list(routes.items())
                for name, (method, path, body) in order if round_ % 2 else order[::-1]:
                    used = await cpu_per_request(http, server, requests, method, path, body)
                    if round_:
                        figures[name].append(used)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.responses_http", description=__doc__)
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--requests", type=int, default=2_000, help="per route and round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    started = time.monotonic()
    figures = asyncio.run(measure(args.backend, args.requests, args.rounds))
    print(f"{args.backend}, API process CPU per request (us), {args.rounds} rounds:")
    for name, used in figures.items():
        rounds = " / ".join(f"{value:,.0f}" for value in used)
        print(f"  {name:34s} median {statistics.median(used):7,.0f}   ({rounds})")
    print(f"({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
