"""The system the soak runs: a private PostgreSQL cluster (commit timestamps on, so that the
event log's order can be read back exactly), a TCP proxy on the database link of the workers
and batch runners, the transport's broker, the provider simulator, and jobgate's roles as
separate processes (api, workers, batch runners, reaper, dispatcher, reconciler), watched by a
supervisor that starts again any process that exited, as systemd or Kubernetes would."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import asyncpg
import httpx
from tests.support.pgcluster import PrivateCluster
from tests.support.processes import JobgateProcess, ProcessHarness, free_port, wait_until
from tests.support.proxy import TcpProxy

from bench import soak_stream_faults
from bench.soak_brokers import Broker, open_broker
from bench.soak_load import LIMITED, PROVIDER

PROVIDER_SECRET = "whsec_" + "c29hay1wcm92aWRlci13ZWJob29rLXNpZ25pbmcta2V5"
BATCH_EVENTS = ["batch.completed", "batch.cancelled", "batch.failed", "batch.expired"]


class Stack:
    def __init__(self, args: Any, directory: Path, log: Callable[[str], None]) -> None:
        self.args = args
        self.directory = directory
        self.log = log
        self.exits = contextlib.ExitStack()
        self.lock = threading.RLock()  # one start or kill at a time
        self.stopping = threading.Event()
        self.exited: Counter[str] = Counter()  # "name: code" of exits nobody asked for
        self.pids: dict[int, str] = {}  # every pid a process had -> its name
        self.managed: list[JobgateProcess] = []
        self.workers: list[JobgateProcess] = []
        self.batch_runners: list[JobgateProcess] = []
        self.metrics_ports: dict[str, int] = {}  # worker name -> its JOBGATE_METRICS_PORT

    # -- start and stop --------------------------------------------------------------

    def __enter__(self) -> Stack:
        try:
            self._start()
        except BaseException:
            self.exits.close()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stopping.set()
        self.exits.close()

    def _start(self) -> None:
        args = self.args
        self.cluster = self.exits.enter_context(PrivateCluster())
        _commit_timestamps_on(self.cluster)
        self.dsn = self.cluster.create_database("soak")
        self.db_link = self.exits.enter_context(TcpProxy(("127.0.0.1", self.cluster.port)))
        self.linked_dsn = self.dsn.replace(f":{self.cluster.port}/", f":{self.db_link.port}/")
        self.broker: Broker = open_broker(args.transport, self.directory)
        self.exits.callback(self.broker.close)
        self.simulator_url = f"http://127.0.0.1:{free_port()}"
        config = self.directory / "jobgate.toml"
        config.write_text(self._config())
        env = {
            "JOBGATE_CONFIG": str(config),
            "JOBGATE_DATABASE_URL": self.dsn,
            "JOBGATE_LEASE_TTL_S": str(args.lease_ttl_s),
            "JOBGATE_HEARTBEAT_INTERVAL_S": str(args.lease_ttl_s / 5),
            "JOBGATE_REAPER_INTERVAL_S": "1",
            "JOBGATE_RECONCILER_INTERVAL_S": "1",
            "JOBGATE_RETRY_BASE_S": "0.2",
            "JOBGATE_RETRY_MAX_S": "2",
            "JOBGATE_MAX_ATTEMPTS": "10",
            "JOBGATE_LOG_LEVEL": "warning",
            "JOBGATE_WEBHOOK_RETRY_PROFILE": "short",
            "JOBGATE_WEBHOOK_ALLOW_HTTP": "1",
            "JOBGATE_WEBHOOK_ALLOW_CIDRS": "127.0.0.1/32",
            "JOBGATE_RETENTION_S": "86400",
            "JOBGATE_WORKER_CONCURRENCY": str(args.worker_concurrency),
            "JOBGATE_TRANSPORT_SWEEP_AFTER_S": str(args.sweep_after_s),
            # docs/transports.md: a window of about twice the fleet's worker slots.
            "JOBGATE_TRANSPORT_WINDOW": str(2 * args.workers * args.worker_concurrency),
            "JOBGATE_SIMULATOR_WEBHOOK_SECRET": PROVIDER_SECRET,
            "SOAK_PROVIDER_WEBHOOK_SECRET": PROVIDER_SECRET,
            **self.broker.env(),
        }
        self.harness = self.exits.enter_context(ProcessHarness(self.directory, env=env, fast=False))
        self.api = self.harness.start("api")
        assert self.api.url is not None
        self.api_url = self.api.url
        self._track(self.api)
        self.simulator = self.harness.start(
            "simulator",
            "--port",
            self.simulator_url.rsplit(":", 1)[1],
            "--webhook-url",
            f"{self.api_url}/v1/provider_webhooks/{PROVIDER}",
            *(["--idempotent"] if args.idempotent_creates else []),
            ready=False,
        )
        self._track(self.simulator)
        self.key = self.harness.create_tenant("soak")
        linked = {"JOBGATE_DATABASE_URL": self.linked_dsn}
        for _ in range(args.workers):
            port = free_port()
            worker = self.harness.start(
                "worker", env={**linked, "JOBGATE_METRICS_PORT": str(port)}, ready=False
            )
            self.metrics_ports[worker.name] = port
            self.workers.append(worker)
        for _ in range(args.batch_runners):
            runner = self.harness.start(
                "serve", "--roles", "batches", env=linked, name="batches", ready=False
            )
            self.batch_runners.append(runner)
        others = [
            self.harness.start(role, ready=False) for role in ("reaper", "dispatcher", "reconciler")
        ]
        self.reconcilers = [p for p in others if p.name == "reconciler"]
        self.dispatchers = [p for p in others if p.name == "dispatcher"]
        for process in [*self.workers, *self.batch_runners, *others]:
            process.wait_ready()
            self._track(process)
        wait_until(
            lambda: _answers(f"{self.simulator_url}/_simulator/state"),
            timeout_s=60,
            what="the simulator",
        )
        supervisor = threading.Thread(target=self._supervise, name="supervisor", daemon=True)
        supervisor.start()
        self.exits.callback(supervisor.join, 10)
        self.exits.callback(self.stopping.set)

    def _config(self) -> str:
        args = self.args
        return (
            f"[providers.{PROVIDER}]\n"
            'kind = "openai"\n'
            f'base_url = "{self.simulator_url}/v1"\n'
            'mode = "background"\n'
            f"idempotent_creates = {'true' if args.idempotent_creates else 'false'}\n"
            'webhook_secret_env = "SOAK_PROVIDER_WEBHOOK_SECRET"\n'
            "reconcile_after_s = 2\n"
            "reconcile_max_interval_s = 5\n"
            "request_timeout_s = 30\n"
            f"\n[providers.{LIMITED}]\n"
            'kind = "openai"\n'
            f'base_url = "{self.simulator_url}/v1"\n'
            'mode = "sync"\n'
            f"rpm = {args.rpm}\n"
            "request_timeout_s = 30\n"
            "\n[tenants.soak]\n"
            f"max_running_per_key = {args.key_cap}\n"
            + (soak_stream_faults.config(self.simulator_url) if args.stream_faults else "")
        )

    def _track(self, process: JobgateProcess) -> None:
        with self.lock:
            self.pids[process.pid] = process.name
            if process not in self.managed:
                self.managed.append(process)

    def batch_endpoint_secret(self, url: str) -> str:
        """Subscribe `url` to the tenant's batch events; the endpoint's signing secret."""
        response = httpx.post(
            f"{self.api_url}/v1/webhook_endpoints",
            json={"url": url, "event_types": BATCH_EVENTS},
            headers={"Authorization": f"Bearer {self.key}"},
            timeout=30,
        )
        response.raise_for_status()
        return str(response.json()["secret"])

    def tenant_secret(self) -> str:
        response = httpx.get(
            f"{self.api_url}/v1/webhook_secret",
            headers={"Authorization": f"Bearer {self.key}"},
            timeout=30,
        )
        response.raise_for_status()
        return str(response.json()["secret"])

    # -- processes -------------------------------------------------------------------

    def kill(self, process: JobgateProcess) -> None:
        """kill -9, then start it again (not waiting for it to be ready)."""
        with self.lock:
            process.kill()
            process.start()
            self.pids[process.pid] = process.name

    def _supervise(self) -> None:
        while not self.stopping.wait(1.0):
            with self.lock:
                for process in self.managed:
                    if process.alive or self.stopping.is_set():
                        continue
                    self.exited[f"{process.name}: {process.returncode}"] += 1
                    self.log(f"{process.name} exited with {process.returncode}; started again")
                    process.start()
                    self.pids[process.pid] = process.name

    def holder(self, lease_owner: str | None) -> str:
        """Which process holds a lease (`worker:host:pid:…`), and whether it is alive."""
        if not lease_owner:
            return "nobody"
        parts = lease_owner.split(":")
        try:
            pid = int(parts[2])
        except (IndexError, ValueError):
            return lease_owner
        name = self.pids.get(pid, f"pid {pid}")
        with self.lock:
            alive = any(p.alive and p.pid == pid for p in self.managed)
        return f"{name} (pid {pid}, {'alive' if alive else 'dead'})"

    def log_count(self, message: str) -> dict[str, int]:
        """How often each worker logged `message` (every incarnation's log)."""
        counts = {}
        for worker in self.workers:
            found = sum(1 for r in worker.log_records() if r.get("message") == message)
            if found:
                counts[worker.name] = found
        return counts

    def waiting(self, job_id: str) -> Any:
        """Why the API says the job waits (its `waiting` member, a dict or None), as a user
        would ask; a string when the API did not answer."""
        try:
            response = httpx.get(
                f"{self.api_url}/v1/jobs/{job_id}",
                headers={"Authorization": f"Bearer {self.key}"},
                timeout=10,
            )
        except httpx.HTTPError as exc:
            return f"unknown ({type(exc).__name__})"
        if response.status_code != 200:
            return f"unknown ({response.status_code})"
        return response.json().get("waiting")

    def restart_postgres(self) -> None:
        self.cluster.restart(mode="immediate")

    def ensure_postgres(self) -> None:
        """Up again after a fault, whatever happened (a restart that failed half way)."""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if asyncio.run(_reachable(self.dsn)):
                return
            with contextlib.suppress(RuntimeError):
                self.cluster.start()
            time.sleep(1)


def _commit_timestamps_on(cluster: PrivateCluster) -> None:
    """track_commit_timestamp: the commit order of the event log, for the key cap check."""

    async def set_it() -> None:
        conn = await asyncpg.connect(cluster.dsn(), timeout=10)
        try:
            await conn.execute("ALTER SYSTEM SET track_commit_timestamp = on")
        finally:
            await conn.close()

    asyncio.run(set_it())
    cluster.restart(mode="fast")


async def _reachable(dsn: str) -> bool:
    try:
        conn = await asyncpg.connect(dsn, timeout=5)
    except (OSError, asyncpg.PostgresError, TimeoutError):
        return False
    await conn.close()
    return True


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
