"""What the soak samples while it runs: the running jobs of each concurrency key (one consistent
read of the job table: any count over the cap is a violation, however short), and each worker's
`jobgate_transport_stalled` gauge (its consumer had no credit left while work waited)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from typing import Any

import asyncpg
import httpx

_OVER_CAP = """
SELECT concurrency_key, count(*) AS running
  FROM jobs
 WHERE state = 'running' AND concurrency_key IS NOT NULL
 GROUP BY concurrency_key
HAVING count(*) > $1
"""
STALLED = "jobgate_transport_stalled"


class Samples:
    def __init__(self, *, dsn: str, key_cap: int, metrics_ports: dict[str, int], every_s: float):
        self.dsn = dsn
        self.key_cap = key_cap
        self.metrics_ports = metrics_ports
        self.every_s = every_s
        self.stop = threading.Event()
        self.key_reads = 0
        self.over_cap: list[tuple[float, str, int]] = []  # (time, key, running)
        self.metric_reads = 0
        self.stall_gauge_seen = False  # some worker exports the gauge
        self.stalled: Counter[str] = Counter()  # worker -> samples with the gauge at 1
        self.stall_episodes: Counter[str] = Counter()  # worker -> times it went 0 -> 1
        self._was_stalled: dict[str, bool] = {}

    def thread(self) -> threading.Thread:
        return threading.Thread(target=lambda: asyncio.run(self._run()), name="samples")

    async def _run(self) -> None:
        conn: asyncpg.Connection | None = None
        async with httpx.AsyncClient(timeout=2) as client:
            while not self.stop.is_set():
                started = time.monotonic()
                conn = await self._read_keys(conn)
                await asyncio.gather(
                    *(
                        self._read_gauge(client, name, port)
                        for name, port in self.metrics_ports.items()
                    )
                )
                await asyncio.sleep(max(0.0, self.every_s - (time.monotonic() - started)))
        if conn is not None:
            await conn.close()

    async def _read_keys(self, conn: asyncpg.Connection | None) -> asyncpg.Connection | None:
        try:
            if conn is None or conn.is_closed():
                conn = await asyncpg.connect(self.dsn, timeout=3)
            rows = await conn.fetch(_OVER_CAP, self.key_cap, timeout=3)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError):
            if conn is not None:
                conn.terminate()
            return None  # the database is being restarted: the event log covers the gap
        self.key_reads += 1
        now = time.time()
        self.over_cap += [(now, row["concurrency_key"], row["running"]) for row in rows]
        return conn

    async def _read_gauge(self, client: httpx.AsyncClient, name: str, port: int) -> None:
        try:
            text = (await client.get(f"http://127.0.0.1:{port}/metrics")).text
        except httpx.HTTPError:
            return  # a worker being restarted
        self.metric_reads += 1
        if f"# TYPE {STALLED} gauge" not in text:
            return  # a build without the gauge: nothing is checked
        self.stall_gauge_seen = True
        values = [
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith(STALLED + "{") or line.startswith(STALLED + " ")
        ]
        stalled = max(values, default=0.0) >= 1
        if stalled:
            self.stalled[name] += 1
            if not self._was_stalled.get(name, False):
                self.stall_episodes[name] += 1
        self._was_stalled[name] = stalled

    def report(self) -> dict[str, Any]:
        return {
            "key_cap_samples": self.key_reads,
            "key_over_cap_samples": len(self.over_cap),
            "consumer_stall_checked": self.stall_gauge_seen,
            "consumer_stalls_sampled": sum(self.stall_episodes.values()),
        }
