"""Limit accuracy over a long run: 2 `jobgate worker` processes on PostgreSQL
against a `jobgate simulator` that enforces rpm and tpm per model the way the providers do
(429 with their headers when over), jobgate configured with the same limits. Two models run
side by side, each bound by one limit:

- `m-rpm`: small calls (about 22 tokens each), so rpm binds;
- `m-tpm`: calls of about 600 tokens (a 1,200-character prompt echoed back, `max_tokens`
  400), so tpm binds.

The queue is kept full for the whole run. Reported per model: calls started, the achieved
rate against the limit (from the first call to the end of the run), the most calls (and
tokens) in any 10 s and any 60 s window, and the simulator's 429 count, which must be 0.

    python -m bench.rate_limit_accuracy [--duration 300] [--rpm 60] [--tpm 6000] [--window-s 10]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import orjson
from tests.support.processes import free_port

from bench import pg, procs
from bench.jobgate_setup import new_tenant, open_runtime
from jobgate.services.jobs import SubmitSpec

ENDPOINT = "/v1/chat/completions"
MODELS = {
    # model: (prompt, max_tokens)
    "m-rpm": ("a small call", 10),
    "m-tpm": ("x" * 1200, 400),
}


def _config(sim_url: str, rpm: int, tpm: int) -> str:
    return "".join(
        f'[providers.{model.replace("-", "_")}]\nkind = "openai"\nbase_url = "{sim_url}/v1"\n'
        f'models = ["{model}"]\nrpm = {rpm}\ntpm = {tpm}\n\n'
        for model in MODELS
    )


def _most(points: list[tuple[float, int]], window_s: float) -> tuple[int, int]:
    """The most calls, and the most tokens, starting in any window of `window_s`."""
    calls = tokens = 0
    for t, _ in points:
        inside = [n for u, n in points if t <= u < t + window_s]
        calls = max(calls, len(inside))
        tokens = max(tokens, sum(inside))
    return calls, tokens


async def _submit(runtime: Any, tenant_id: str, model: str, count: int) -> None:
    prompt, max_tokens = MODELS[model]
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
    }
    spec = SubmitSpec(endpoint=ENDPOINT, body=body, provider=model.replace("-", "_"))
    for start in range(0, count, 500):
        await runtime.jobs.submit_many(tenant_id=tenant_id, specs=[spec] * min(500, count - start))


async def run(duration_s: float, rpm: int, tpm: int, window_s: float) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="rate-accuracy-"))
    sim_port = free_port()
    sim_url = f"http://127.0.0.1:{sim_port}"
    config = workdir / "jobgate.toml"
    config.write_text(_config(sim_url, rpm, tpm))
    dsn = await pg.create("ratelimits")
    simulator = workers = None
    try:
        env = procs.jobgate_env(dsn, workdir, config=config)
        sim_args = ["simulator", "--port", str(sim_port), "--rpm", str(rpm), "--tpm", str(tpm)]
        sim_args += ["--rate-window-s", str(window_s)]
        simulator = procs.start_jobgate("simulator", sim_args, env=env, workdir=workdir,
                                        log_dir=workdir)  # fmt: skip
        procs.wait_listening(simulator)
        runtime = await open_runtime(dsn, providers=_providers(sim_url, rpm, tpm))
        tenant_id, _ = await new_tenant(runtime)
        # Enough for the whole run at the limits, and more: the queue never runs dry.
        await _submit(runtime, tenant_id, "m-rpm", int(rpm * duration_s / 60 * 1.5) + 20)
        await _submit(runtime, tenant_id, "m-tpm", int(tpm * duration_s / 60 / 600 * 1.5) + 20)
        await runtime.close()
        workers = [
            procs.start_jobgate(f"worker{i}", ["worker"], env=env, workdir=workdir, log_dir=workdir)
            for i in range(2)
        ]
        began = time.monotonic()
        await asyncio.sleep(duration_s)
        ended = time.time()
        for worker in workers:
            worker.stop()
        async with httpx.AsyncClient(timeout=30) as client:
            state = (await client.get(f"{sim_url}/_simulator/state")).json()
        elapsed = time.monotonic() - began
        await _report(dsn, state, rpm, tpm, window_s, elapsed, ended)
    finally:
        for proc in [*(workers or []), *([simulator] if simulator else [])]:
            proc.stop()
        await pg.drop(dsn)


def _providers(sim_url: str, rpm: int, tpm: int) -> dict[str, Any]:
    return {
        model.replace("-", "_"): {
            "kind": "openai",
            "base_url": f"{sim_url}/v1",
            "models": [model],
            "rpm": rpm,
            "tpm": tpm,
        }
        for model in MODELS
    }


async def _report(
    dsn: str,
    state: dict[str, Any],
    rpm: int,
    tpm: int,
    window_s: float,
    elapsed_s: float,
    ended: float,
) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT id, model, usage FROM jobs WHERE state = 'succeeded' OR run_count > 0"
        )
    finally:
        await conn.close()
    jobs = {
        r["id"]: (
            r["model"],
            orjson.loads(r["usage"]) if isinstance(r["usage"], str) else r["usage"],
        )
        for r in rows
    }
    print(f"simulator enforcing rpm={rpm} tpm={tpm} per model, bucket of {window_s:g} s; "
          f"jobgate the same; 2 worker processes; {elapsed_s:.0f} s")  # fmt: skip
    print(f"simulator: {state['rate_limits']}")
    print("| model | calls | achieved / limit | most in 10 s (calls, tokens) | "
          "most in 60 s (calls, tokens) |")  # fmt: skip
    print("| --- | --- | --- | --- | --- |")
    for model in MODELS:
        points = []
        for request in state["request_log"]:
            job = jobs.get(request["idempotency_key"] or "")
            if request["path"] == ENDPOINT and job is not None and job[0] == model:
                usage = job[1] or {}
                used = int(usage.get("input_tokens") or usage.get("prompt_tokens") or 0) + int(
                    usage.get("output_tokens") or usage.get("completion_tokens") or 0
                )
                points.append((request["at"], used))
        points.sort()
        if not points:
            print(f"| {model} | 0 | | | |")
            continue
        span_min = (ended - points[0][0]) / 60
        calls_rate = len(points) / span_min
        token_rate = sum(n for _, n in points) / span_min
        achieved = (
            f"{calls_rate:.1f} rpm / {rpm} = {calls_rate / rpm:.1%}"
            if model == "m-rpm"
            else f"{token_rate:.0f} tpm / {tpm} = {token_rate / tpm:.1%}"
        )
        ten = _most(points, 10.0)
        sixty = _most(points, 60.0)
        print(f"| {model} | {len(points)} | {achieved} | {ten[0]}, {ten[1]} | "
              f"{sixty[0]}, {sixty[1]} |")  # fmt: skip


def _json(value: Any) -> Any:
    return orjson.loads(value) if isinstance(value, str) else value


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=float, default=300.0)
    parser.add_argument("--rpm", type=int, default=60)
    parser.add_argument("--tpm", type=int, default=6000)
    parser.add_argument("--window-s", type=float, default=10.0)
    args = parser.parse_args()
    asyncio.run(run(args.duration, args.rpm, args.tpm, args.window_s))


if __name__ == "__main__":
    main()
