"""A description of where a run happened, for the report."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

PACKAGES = (
    "jobgate", "pgqueuer", "procrastinate", "asyncpg", "psycopg", "fastapi", "starlette",
    "uvicorn", "uvloop", "httptools", "pydantic", "orjson",
)  # fmt: skip


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gib() -> float | None:
    try:
        with open("/proc/meminfo") as info:
            for line in info:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


def load_average() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


PROBE_ITERATIONS = 5_000_000
PROBE_FSYNCS = 100


def speed_probe() -> float:
    """Seconds this process takes for a fixed pure-Python loop (the best of three): how fast
    the host runs Python at that moment."""
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        total = 0
        for i in range(PROBE_ITERATIONS):
            total += i
        best = min(best, time.perf_counter() - started)
    return round(best, 3)


def fsync_probe(directory: Path) -> dict[str, float]:
    """Milliseconds an fsync of a 4 KiB append takes in `directory` (median and 90th
    percentile of PROBE_FSYNCS): every commit waits for one, in PostgreSQL and in SQLite."""
    path = directory / "fsync-probe"
    took = []
    with path.open("wb") as file:
        for _ in range(PROBE_FSYNCS):
            file.write(b"x" * 4096)
            file.flush()
            started = time.perf_counter()
            os.fsync(file.fileno())
            took.append(time.perf_counter() - started)
    path.unlink()
    took.sort()
    return {
        "p50_ms": round(took[len(took) // 2] * 1000, 2),
        "p90_ms": round(took[len(took) * 9 // 10] * 1000, 2),
    }


def probes(directory: Path) -> dict[str, Any]:
    """How fast the host is at this moment, recorded at the start and the end of each run and
    printed in the report. Every absolute figure moves with the host: on 2026-12-03 the same
    code drained SQLite at 11,662 jobs/s on one 2-CPU virtual machine (AMD EPYC) and at
    4,800-8,900 on another (Intel Xeon, 2.8 GHz), whose speed also moved within the hour. The
    ratios between systems measured in one run move far less."""
    return {"python_loop_s": speed_probe(), "fsync": fsync_probe(directory)}


def describe() -> dict[str, Any]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "cpu": _cpu_model(),
        "cpus": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)),
        "memory_gib": _memory_gib(),
        "os": f"{platform.system()} {platform.release()}",
        "python": sys.version.split()[0],
        "packages": versions,
        "load_average_at_start": load_average(),
    }
