"""A batch end to end on the simulator: one `jobgate serve` process (api, worker,
reaper, batches) on a fresh SQLite file (--postgres: a throwaway PostgreSQL database); upload an
N-line JSONL through POST /v1/files, create the batch, poll until it completes, download the
output. Prints the wall time of each phase and the serve process's peak RSS per phase: while
uploading, while running, and while finalizing (writing the output file).

    python -m bench.batch_e2e --lines 50000 [--postgres]   # the issue's figure (not in CI)
    python -m bench.batch_e2e --lines 2000                 # a quick look
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import threading
import time
from pathlib import Path

import httpx
import orjson

from bench import pg, procs
from bench.jobgate_setup import new_tenant, open_runtime

CHAT = "/v1/chat/completions"


class RssSampler:
    """Peak RSS of one process per phase, sampled every 50 ms in a thread."""

    def __init__(self, pid: int) -> None:
        self.pid, self.phase = pid, "start"
        self.peaks: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            rss = procs.rss_bytes(self.pid)
            self.peaks[self.phase] = max(self.peaks.get(self.phase, 0), rss)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def jsonl(lines: int) -> bytes:
    out = bytearray()
    for i in range(lines):
        body = {"model": "sim-echo", "messages": [{"role": "user", "content": f"line {i}"}]}
        line = {"custom_id": f"c{i}", "method": "POST", "url": CHAT, "body": body}
        out += orjson.dumps(line) + b"\n"
    return bytes(out)


async def run(lines: int, directory: Path, *, postgres: bool) -> dict[str, float]:
    if not postgres:
        return await run_on(f"sqlite:///{directory / 'jobgate.db'}", lines, directory)
    async with pg.fresh("batch") as dsn:
        return await run_on(dsn, lines, directory)


async def run_on(url: str, lines: int, directory: Path) -> dict[str, float]:
    runtime = await open_runtime(url)
    try:
        _, api_key = await new_tenant(runtime)
    finally:
        await runtime.close()
    server = procs.start_jobgate(
        "batch-serve",
        ["serve", "--port", "0"],
        env=procs.jobgate_env(url, directory),
        workdir=directory,
        log_dir=directory / "logs",
    )
    content = jsonl(lines)
    figures: dict[str, float] = {"lines": lines, "input_mib": len(content) / 2**20}
    try:
        base_url = await asyncio.to_thread(procs.wait_listening, server)
        headers = {"Authorization": f"Bearer {api_key}"}
        async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=600) as http:
            with RssSampler(server.pid) as rss:
                rss.phase = "idle"
                await asyncio.sleep(0.3)
                started = time.monotonic()
                rss.phase = "upload"
                uploaded = await http.post(
                    "/v1/files", data={"purpose": "batch"}, files={"file": ("in.jsonl", content)}
                )
                uploaded.raise_for_status()
                figures["upload_s"] = time.monotonic() - started
                rss.phase = "run"
                created = await http.post(
                    "/v1/batches",
                    json={"input_file_id": uploaded.json()["id"], "endpoint": CHAT,
                          "completion_window": "24h"},
                )  # fmt: skip
                created.raise_for_status()
                batch = created.json()
                while batch["status"] not in ("completed", "failed", "expired", "cancelled"):
                    await asyncio.sleep(0.05)
                    batch = (await http.get(f"/v1/batches/{batch['id']}")).json()
                    if batch["status"] == "finalizing":
                        rss.phase = "finalize"
                figures["wall_s"] = time.monotonic() - started
                rss.phase = "download"
                output = await http.get(f"/v1/files/{batch['output_file_id']}/content")
                figures["output_mib"] = len(output.content) / 2**20
            assert batch["status"] == "completed", batch
            assert batch["request_counts"]["completed"] == lines, batch["request_counts"]
            for phase, peak in rss.peaks.items():
                figures[f"rss_{phase}_mib"] = peak / 2**20
    finally:
        await asyncio.to_thread(server.stop)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=50_000)
    parser.add_argument("--postgres", action="store_true", help="a throwaway database (bench.pg)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="jobgate-batch-") as scratch:
        figures = asyncio.run(run(args.lines, Path(scratch), postgres=args.postgres))
    for name, value in figures.items():
        print(f"{name:>20}: {value:,.2f}")


if __name__ == "__main__":
    main()
