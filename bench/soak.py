"""The soak checker, in the spirit of Jepsen's queue checker.

Runs api, N workers and a reaper (plus the webhook dispatcher when this build has one) as
separate processes on a private, throwaway PostgreSQL cluster; submits jobs at a fixed rate
for a set duration (each with its own Idempotency-Key, retried like a careful client would)
while killing a random worker with SIGKILL every N seconds and crash-restarting PostgreSQL
(`pg_ctl restart -m immediate`) every M seconds. Then it waits for the accepted jobs to settle
and counts, from the database:

- lost jobs: accepted (2xx) but not terminal, or missing;
- double completions: more than one applied terminal event;
- double billing: more than one usage ledger row;
- duplicate provider calls: claims beyond the first (allowed: calls are at-least-once);
- duplicate webhook effects: deliveries of one webhook-id applied twice at a receiver (when the
  build has a dispatcher).

    python bench/soak.py --duration 1200 --rate 10 --kill-every 15 --pg-restart-every 300

Exits 1 when anything is lost or completed twice. Needs the PostgreSQL server binaries
(initdb, pg_ctl) and, as root, a `postgres` user.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import secrets
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from jobgate.services.runtime import available_roles
from jobgate.testing import audit
from jobgate.testing.pgcluster import PrivateCluster
from jobgate.testing.processes import JobgateProcess, ProcessHarness


class Receiver:
    """A webhook endpoint that counts each webhook-id it applies."""

    def __init__(self) -> None:
        self.effects: Counter[str] = Counter()
        self.deliveries = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                self.rfile.read(length)
                receiver.deliveries += 1
                event_id = self.headers.get("webhook-id")
                if event_id:
                    receiver.effects[event_id] += 1
                self.send_response(200)
                self.end_headers()

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def duplicate_effects(self) -> int:
        return sum(n - 1 for n in self.effects.values() if n > 1)

    def close(self) -> None:
        self.server.shutdown()


class Soak:
    def __init__(self, args: argparse.Namespace, directory: Path) -> None:
        self.args = args
        self.directory = directory
        self.rng = random.Random(args.seed)
        self.accepted: list[str] = []
        self.gave_up = 0  # submits that never got a 2xx within their retry budget
        self.answers: Counter[str] = Counter()
        self.kills = 0
        self.pg_restarts = 0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.webhooks = "dispatcher" in available_roles()
        self.receiver = Receiver() if self.webhooks else None

    def log(self, message: str) -> None:
        if not self.args.quiet:
            print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)

    # -- clients ---------------------------------------------------------------------

    def submit_one(self, client: httpx.Client, n: int) -> None:
        body: dict[str, Any] = {
            "endpoint": "/v1/chat/completions",
            "body": {
                "model": "sim-echo",
                "messages": [{"role": "user", "content": f"soak {n}"}],
                "sim": {"latency_s": round(self.rng.uniform(0.1, self.args.max_latency_s), 2)},
            },
        }
        if self.receiver is not None:
            body["webhook"] = {"url": self.receiver.url}
        headers = {"Idempotency-Key": f"soak-{n}-{secrets.token_hex(4)}"}
        deadline = time.monotonic() + self.args.submit_budget_s
        while time.monotonic() < deadline:
            try:
                response = client.post("/v1/jobs", json=body, headers=headers)
            except httpx.TransportError as exc:
                self.count(type(exc).__name__)
                time.sleep(0.2)
                continue
            self.count(str(response.status_code))
            if response.status_code in (200, 202):
                with self.lock:
                    self.accepted.append(response.json()["id"])
                return
            if response.status_code not in (409, 429, 503):
                self.log(f"submit {n}: unexpected {response.status_code} {response.text[:200]}")
                break
            time.sleep(float(response.headers.get("Retry-After", "1")))
        with self.lock:
            self.gave_up += 1

    def count(self, answer: str) -> None:
        with self.lock:
            self.answers[answer] += 1

    def submitter(self, url: str, key: str) -> None:
        interval = 1.0 / self.args.rate
        headers = {"Authorization": f"Bearer {key}"}
        with (
            httpx.Client(base_url=url, headers=headers, timeout=15) as client,
            ThreadPoolExecutor(16) as pool,
        ):
            start = time.monotonic()
            n = 0
            while not self.stop.is_set():
                pool.submit(self.submit_one, client, n)
                n += 1
                self.stop.wait(max(0.0, start + n * interval - time.monotonic()))

    # -- faults ----------------------------------------------------------------------

    def worker_killer(self, workers: list[JobgateProcess]) -> None:
        while not self.stop.wait(self.args.kill_every):
            victim = self.rng.choice(workers)
            victim.kill()
            self.kills += 1
            self.log(f"kill -9 {victim.name}")
            victim.start()

    def pg_restarter(self, cluster: PrivateCluster) -> None:
        while not self.stop.wait(self.args.pg_restart_every):
            self.log("pg_ctl restart -m immediate")
            cluster.restart(mode="immediate")
            self.pg_restarts += 1

    # -- the run ---------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        args = self.args
        with PrivateCluster() as cluster:
            dsn = cluster.create_database("soak")
            env = {
                "JOBGATE_DATABASE_URL": dsn,
                "JOBGATE_LEASE_TTL_S": str(args.lease_ttl_s),
                "JOBGATE_HEARTBEAT_INTERVAL_S": str(args.lease_ttl_s / 5),
                "JOBGATE_REAPER_INTERVAL_S": "1",
                "JOBGATE_RETRY_BASE_S": "0.2",
                "JOBGATE_RETRY_MAX_S": "2",
                "JOBGATE_MAX_ATTEMPTS": "10",
                "JOBGATE_LOG_LEVEL": "warning",
                "JOBGATE_WEBHOOK_RETRY_PROFILE": "short",
                "JOBGATE_WEBHOOK_ALLOW_HTTP": "1",
                "JOBGATE_WEBHOOK_ALLOW_CIDRS": "127.0.0.1/32",
                "JOBGATE_RETENTION_S": "86400",
            }
            with ProcessHarness(self.directory, env=env, fast=False) as harness:
                api = harness.start("api")
                assert api.url is not None
                key = harness.create_tenant("soak")
                workers = [harness.start("worker", ready=False) for _ in range(args.workers)]
                harness.start("reaper", ready=False)
                if self.webhooks:
                    harness.start("dispatcher", ready=False)
                for worker in workers:
                    worker.wait_ready()
                self.log(
                    f"soak: {args.duration} s at {args.rate}/s, {args.workers} workers, kill "
                    f"every {args.kill_every} s, PostgreSQL restart every {args.pg_restart_every} s"
                )
                threads = [
                    threading.Thread(target=self.submitter, args=(api.url, key)),
                    threading.Thread(target=self.worker_killer, args=(workers,)),
                    threading.Thread(target=self.pg_restarter, args=(cluster,)),
                ]
                for thread in threads:
                    thread.start()
                try:
                    self.stop.wait(args.duration)
                finally:
                    self.stop.set()
                    for thread in threads:
                        thread.join()
                self.log(f"load stopped; {len(self.accepted)} accepted; waiting to settle")
                facts = self.settle(dsn)
                verdict = audit.check(facts, self.accepted)
                if self.receiver is not None:
                    self.settle_webhooks(facts)
                for process in harness.processes:
                    if process.alive is False and process.returncode not in (None, -9):
                        self.log(f"{process.name} exited with {process.returncode}")
        return self.report(verdict)

    def settle(self, dsn: str) -> dict[str, audit.JobFacts]:
        deadline = time.monotonic() + self.args.settle_timeout_s
        facts: dict[str, audit.JobFacts] = {}
        while time.monotonic() < deadline:
            facts = audit.job_facts(dsn)
            pending = [i for i in self.accepted if i not in facts or not facts[i].terminal]
            if not pending:
                break
            time.sleep(1)
        return facts

    def settle_webhooks(self, facts: dict[str, audit.JobFacts]) -> None:
        assert self.receiver is not None
        deadline = time.monotonic() + self.args.settle_timeout_s
        expected = sum(1 for f in facts.values() if f.terminal)
        while time.monotonic() < deadline and len(self.receiver.effects) < expected:
            time.sleep(1)

    def report(self, verdict: audit.Verdict) -> dict[str, Any]:
        result = verdict.as_dict()
        result.update(
            duration_s=self.args.duration,
            rate_per_s=self.args.rate,
            worker_kills=self.kills,
            postgres_restarts=self.pg_restarts,
            submits_given_up=self.gave_up,
            answers=dict(sorted(self.answers.items())),
            ok=verdict.ok,
        )
        if self.receiver is not None:
            result["webhook_deliveries"] = self.receiver.deliveries
            result["webhook_events_applied"] = len(self.receiver.effects)
            result["duplicate_webhook_effects"] = self.receiver.duplicate_effects
            self.receiver.close()
        else:
            result["duplicate_webhook_effects"] = "n/a (this build has no dispatcher role)"
        if verdict.lost or verdict.missing:
            result["lost_sample"] = (verdict.lost + verdict.missing)[:10]
        if verdict.double_completions:
            result["double_completion_sample"] = verdict.double_completions[:10]
        return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=1200, help="seconds of load")
    parser.add_argument("--rate", type=float, default=10, help="submits per second")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--kill-every", type=float, default=15, help="SIGKILL a worker (s)")
    parser.add_argument(
        "--pg-restart-every", type=float, default=300, help="crash-restart PostgreSQL (s)"
    )
    parser.add_argument("--lease-ttl-s", type=float, default=5)
    parser.add_argument("--max-latency-s", type=float, default=2, help="simulated call time")
    parser.add_argument("--submit-budget-s", type=float, default=60, help="retry a submit for")
    parser.add_argument("--settle-timeout-s", type=float, default=180)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--json", action="store_true", help="print only the JSON result")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    if args.json:
        args.quiet = True
    with tempfile.TemporaryDirectory(prefix="jobgate-soak-") as directory:
        result = Soak(args, Path(directory)).run()
    if args.json:
        print(json.dumps(result))
    else:
        width = max(len(k) for k in result)
        for name, value in result.items():
            print(f"{name:<{width}}  {value}")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
