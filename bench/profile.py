"""`python -m bench.profile SCENARIO [--jobs N] [--rate R]` (drain, drain-sqlite, submit, status,
submit-sqlite, status-sqlite): one jobgate scenario of the benchmark with py-spy sampling the
jobgate processes under load, then the functions that use the most CPU (inclusive and own
time). The raw stacks are kept (collapsed format, for flame graph tools) under
bench/results/profile-*/.

py-spy must be allowed to read the processes (root, or ptrace permission).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import dataclasses
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from bench import http_bench, jobgate_drain, pg, procs
from bench.context import RunContext
from bench.sizes import FULL

ROOT = Path(__file__).resolve().parent.parent
_FRAME = re.compile(r"^(?P<function>.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


class Sampler:
    """py-spy attached to every jobgate process the scenario starts."""

    def __init__(self, out_dir: Path, rate: int) -> None:
        self.out_dir = out_dir
        self.rate = rate
        self.samplers: list[tuple[subprocess.Popen[bytes], Path]] = []

    def attach(self, proc: procs.Proc) -> None:
        path = self.out_dir / f"{proc.name}.txt"
        sampler = subprocess.Popen(
            [
                _py_spy(), "record", "--pid", str(proc.pid),
                "--rate", str(self.rate), "--format", "raw", "--nonblocking",
                "--output", str(path),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.samplers.append((sampler, path))

    def stop(self) -> list[Path]:
        for sampler, _ in self.samplers:
            if sampler.poll() is None:
                sampler.send_signal(signal.SIGINT)
        for sampler, _ in self.samplers:
            try:
                sampler.wait(30)
            except subprocess.TimeoutExpired:
                sampler.kill()
        return [path for _, path in self.samplers if path.exists()]


def _py_spy() -> str:
    beside = Path(sys.executable).parent / "py-spy"  # installed in the same environment
    return str(beside) if beside.exists() else (shutil.which("py-spy") or "py-spy")


def _short(path: str) -> str:
    for marker in ("site-packages/", "/src/", "/lib/python3."):
        if marker in path:
            tail = path.split(marker, 1)[1]
            return tail.split("/", 1)[1] if marker == "/lib/python3." else tail
    return path


def summarize(paths: list[Path], top: int = 35) -> str:
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    total = 0
    for path in paths:
        for line in path.read_text().splitlines():
            stack, _, count_text = line.rpartition(" ")
            if not stack or not count_text.isdigit():
                continue
            count = int(count_text)
            total += count
            names = []
            for frame in stack.split(";"):
                match = _FRAME.match(frame.strip())
                name = f"{match['function']} ({_short(match['file'])})" if match else frame.strip()
                names.append(name)
            for name in set(names):
                inclusive[name] += count
            if names:
                own[names[-1]] += count
    lines = [f"{total} samples (CPU only) from {len(paths)} process(es)", "", "inclusive:"]
    lines += [f"{100 * n / total:5.1f}%  {name}" for name, n in inclusive.most_common(top)]
    lines += ["", "own time:"]
    lines += [f"{100 * n / total:5.1f}%  {name}" for name, n in own.most_common(top)]
    return "\n".join(lines)


async def scenario(name: str, ctx: RunContext, jobs: int, rate: int, concurrency: int) -> str:
    if name == "drain":
        template = await jobgate_drain.filled_template(ctx, jobs)
        try:
            case = await jobgate_drain.drain_postgres(
                ctx, template, processes=1, concurrency=concurrency, jobs=jobs
            )
        finally:
            await pg.drop(template)
        return str(case.metrics)
    if name == "drain-sqlite":
        case = await jobgate_drain.drain_sqlite(ctx, concurrency=concurrency, jobs=jobs)
        return str(case.metrics)
    ctx.sizes = dataclasses.replace(
        ctx.sizes,
        http_submit_rates=(rate,) if name.startswith("submit") else (),
        http_status_rates=(rate,) if name.startswith("status") else (),
    )
    if name.endswith("-sqlite"):
        cases = await http_bench.http_sqlite(ctx)
    else:
        cases = await http_bench.http_postgres(ctx)
    return "\n".join(str(c.metrics) for c in cases)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.profile")
    parser.add_argument(
        "scenario",
        choices=("drain", "drain-sqlite", "submit", "status", "submit-sqlite", "status-sqlite"),
    )
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rate", type=int, default=1000, help="HTTP requests per second")
    parser.add_argument("--sample-rate", type=int, default=250)
    args = parser.parse_args()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out_dir = ROOT / "bench" / "results" / f"profile-{stamp}-{args.scenario}"
    out_dir.mkdir(parents=True)
    sampler = Sampler(out_dir, args.sample_rate)
    procs.PROFILE_HOOK = sampler.attach
    scratch = Path(tempfile.mkdtemp(prefix="jobgate-profile-"))
    ctx = RunContext(FULL, scratch, out_dir / "logs", True, False)
    try:
        outcome = asyncio.run(scenario(args.scenario, ctx, args.jobs, args.rate, args.concurrency))
    finally:
        paths = sampler.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    text = f"{args.scenario}: {outcome}\n\n{summarize(paths)}"
    (out_dir / "summary.txt").write_text(text)
    print(text)
    print(f"\nraw stacks: {out_dir}")


if __name__ == "__main__":
    main()
