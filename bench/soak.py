"""The soak checker, in the spirit of Jepsen's queue checker.

Runs api, N workers, a reaper, the webhook dispatcher and the reconciler as separate processes
on a private, throwaway PostgreSQL cluster, with the provider simulator server (`jobgate
simulator`) as a provider in background mode that sends signed webhooks. Submits jobs at a
fixed rate for a set duration (each with its own Idempotency-Key, retried like a careful client
would; a share of them background Responses jobs at the simulator, with duplicate, out-of-order
and lost provider webhooks mixed in; every job with its own webhook URL) while killing a random
worker, dispatcher or reconciler with SIGKILL every N seconds and crash-restarting PostgreSQL
(`pg_ctl restart -m immediate`) every M seconds. Then it waits for the accepted jobs to settle
and counts, from the database and at the user's webhook receiver:

- lost jobs: accepted (2xx) but not terminal, or missing;
- double completions: more than one applied terminal event;
- double billing: more than one usage ledger row;
- duplicate provider calls: claims beyond the first (allowed: calls are at-least-once);
- duplicate provider creates: background jobs the simulator created that no job records
  (the soak's provider is the realistic simulator, which, like OpenAI and Anthropic, does
  not deduplicate creates: `idempotent_creates = false`, so a worker killed mid-create fails
  its job `creation_outcome_unknown` and may leave one here; reported, not an error);
- jobs cancelled without a request (the soak never cancels: must be 0);
- duplicate webhook effects: the receiver verifies each signature and deduplicates on
  webhook-id, as docs/webhooks.md tells users to; an event that reaches it under a second
  webhook-id would be applied twice (must be 0). Redeliveries of one webhook-id are allowed
  (at-least-once) and reported, as are terminal jobs whose event never arrived (must be 0).

    python bench/soak.py --duration 1200 --rate 10 --kill-every 15 --pg-restart-every 300

Exits 1 when anything is lost, completed or billed twice, or a webhook effect was applied
twice or never. Needs the PostgreSQL server binaries (initdb, pg_ctl) and, as root, a
`postgres` user.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
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

from jobgate.client.webhooks import WebhookVerificationError, verify_webhook
from jobgate.testing import audit
from jobgate.testing.pgcluster import PrivateCluster
from jobgate.testing.processes import JobgateProcess, ProcessHarness, free_port, wait_until

PROVIDER = "upstream"
PROVIDER_SECRET = "whsec_" + "c29hay1wcm92aWRlci13ZWJob29rLXNpZ25pbmcta2V5"
PROVIDER_WEBHOOKS = ("send", "send", "duplicate", "out_of_order", "none")


class Receiver:
    """The user's webhook endpoint, written as docs/webhooks.md says: verify the signature,
    deduplicate on webhook-id, then apply the event. A share of deliveries is answered 500
    after the effect was applied (a receiver that crashed before answering), so that
    redeliveries of applied events really happen."""

    def __init__(self, *, fail_rate: float, seed: int | None) -> None:
        self.secret = ""  # the tenant's secret, set once the tenant exists
        self.fail_rate = fail_rate
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.seen: set[str] = set()  # webhook-ids applied
        self.effects: Counter[tuple[str, str]] = Counter()  # (job id, event type) -> applied
        self.deliveries = 0
        self.redeliveries = 0  # a webhook-id seen before: acknowledged, not applied again
        self.rejected = 0  # failed verification
        self.failed_on_purpose = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                self.send_response(receiver.receive(body, dict(self.headers.items())))
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def receive(self, body: bytes, headers: dict[str, str]) -> int:
        try:
            payload = verify_webhook(body, headers, self.secret)
        except WebhookVerificationError:
            with self.lock:
                self.rejected += 1
            return 400
        webhook_id = {k.lower(): v for k, v in headers.items()}["webhook-id"]
        with self.lock:
            self.deliveries += 1
            if webhook_id in self.seen:
                self.redeliveries += 1
            else:
                self.seen.add(webhook_id)
                self.effects[(payload["data"]["id"], payload["type"])] += 1
            if self.rng.random() < self.fail_rate:
                self.failed_on_purpose += 1
                return 500
        return 200

    def applied_for(self, job_id: str) -> int:
        with self.lock:
            return sum(n for (job, _type), n in self.effects.items() if job == job_id)

    @property
    def duplicate_effects(self) -> int:
        with self.lock:
            return sum(n - 1 for n in self.effects.values() if n > 1)

    def close(self) -> None:
        self.server.shutdown()


class Soak:
    def __init__(self, args: argparse.Namespace, directory: Path) -> None:
        self.args = args
        self.directory = directory
        self.rng = random.Random(args.seed)
        self.accepted: list[str] = []
        self.background: set[str] = set()
        self.gave_up = 0  # submits that never got a 2xx within their retry budget
        self.answers: Counter[str] = Counter()
        self.kills: Counter[str] = Counter()
        self.pg_restarts = 0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.receiver = Receiver(fail_rate=args.receiver_fail_rate, seed=args.seed)
        self.load_before = os.getloadavg()
        self.load_during = self.load_before
        self.orphans: list[str] = []
        self.background_created = 0
        self.cancelled_unasked: list[str] = []

    def log(self, message: str) -> None:
        if not self.args.quiet:
            print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)

    # -- clients ---------------------------------------------------------------------

    def body(self, n: int) -> tuple[dict[str, Any], bool]:
        latency_s = round(self.rng.uniform(0.1, self.args.max_latency_s), 2)
        webhook = {"url": self.receiver.url}
        if self.rng.random() < self.args.background_share:
            sim = {"latency_s": latency_s, "webhooks": self.rng.choice(PROVIDER_WEBHOOKS)}
            return {
                "provider": PROVIDER,
                "endpoint": "/v1/responses",
                "body": {"model": "gpt-4.1-mini", "input": f"soak {n}", "sim": sim},
                "webhook": webhook,
            }, True
        return {
            "endpoint": "/v1/chat/completions",
            "body": {
                "model": "sim-echo",
                "messages": [{"role": "user", "content": f"soak {n}"}],
                "sim": {"latency_s": latency_s},
            },
            "webhook": webhook,
        }, False

    def submit_one(self, client: httpx.Client, n: int) -> None:
        with self.lock:
            body, background = self.body(n)
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
                    job_id = response.json()["id"]
                    self.accepted.append(job_id)
                    if background:
                        self.background.add(job_id)
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

    def killer(self, victims: list[JobgateProcess]) -> None:
        while not self.stop.wait(self.args.kill_every):
            victim = self.rng.choice(victims)
            victim.kill()
            self.kills[victim.name.split("-")[0]] += 1
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
            simulator_url = f"http://127.0.0.1:{free_port()}"
            config = self.directory / "jobgate.toml"
            config.write_text(
                f"[providers.{PROVIDER}]\n"
                'kind = "openai"\n'
                f'base_url = "{simulator_url}/v1"\n'
                'mode = "background"\n'
                f"idempotent_creates = {'true' if args.idempotent_creates else 'false'}\n"
                'webhook_secret_env = "SOAK_PROVIDER_WEBHOOK_SECRET"\n'
                "reconcile_after_s = 2\n"
                "reconcile_max_interval_s = 5\n"
                "request_timeout_s = 30\n"
            )
            env = {
                "JOBGATE_CONFIG": str(config),
                "JOBGATE_DATABASE_URL": dsn,
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
                "JOBGATE_SIMULATOR_WEBHOOK_SECRET": PROVIDER_SECRET,
                "SOAK_PROVIDER_WEBHOOK_SECRET": PROVIDER_SECRET,
            }
            with ProcessHarness(self.directory, env=env, fast=False) as harness:
                api = harness.start("api")
                assert api.url is not None
                harness.start(
                    "simulator",
                    "--port",
                    simulator_url.rsplit(":", 1)[1],
                    "--webhook-url",
                    f"{api.url}/v1/provider_webhooks/{PROVIDER}",
                    *(["--idempotent"] if args.idempotent_creates else []),
                    ready=False,
                )
                key = harness.create_tenant("soak")
                self.receiver.secret = httpx.get(
                    f"{api.url}/v1/webhook_secret",
                    headers={"Authorization": f"Bearer {key}"},
                    timeout=30,
                ).json()["secret"]
                workers = [harness.start("worker", ready=False) for _ in range(args.workers)]
                others = [
                    harness.start(role, ready=False)
                    for role in ("reaper", "dispatcher", "reconciler")
                ]
                for process in [*workers, *others]:
                    process.wait_ready()
                wait_until(
                    lambda: _answers(f"{simulator_url}/_simulator/state"),
                    timeout_s=60,
                    what="the simulator",
                )
                victims = [*workers, *(p for p in others if p.name != "reaper")]
                self.log(
                    f"soak: {args.duration} s at {args.rate}/s ({args.background_share:.0%} "
                    f"background), {args.workers} workers, kill a worker, dispatcher or "
                    f"reconciler every {args.kill_every} s, PostgreSQL restart every "
                    f"{args.pg_restart_every} s; load average {self.load_before}"
                )
                threads = [
                    threading.Thread(target=self.submitter, args=(api.url, key)),
                    threading.Thread(target=self.killer, args=(victims,)),
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
                self.load_during = os.getloadavg()
                self.log(f"load stopped; {len(self.accepted)} accepted; waiting to settle")
                facts = self.settle(dsn)
                verdict = audit.check(facts, self.accepted)
                missing_effects = self.settle_webhooks(facts)
                created = httpx.get(f"{simulator_url}/_simulator/state", timeout=30).json()[
                    "created"
                ]
                recorded = {f.provider_job_id for f in facts.values() if f.provider_job_id}
                self.orphans = [c for c in created if c not in recorded]
                # The soak never cancels: a cancelled job cancelled itself (issue 24: a lost
                # accept reply once made a worker cancel its own provider job).
                self.cancelled_unasked = [i for i, f in facts.items() if f.state == "cancelled"]
                self.background_created = len(created)
                for process in harness.processes:
                    if process.alive is False and process.returncode not in (None, -9):
                        self.log(f"{process.name} exited with {process.returncode}")
        return self.report(verdict, missing_effects)

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

    def settle_webhooks(self, facts: dict[str, audit.JobFacts]) -> list[str]:
        """Wait until every terminal job's event has been applied at the receiver; return the
        jobs whose event never came."""
        terminal = [i for i in self.accepted if i in facts and facts[i].terminal]
        deadline = time.monotonic() + self.args.settle_timeout_s
        missing = terminal
        while time.monotonic() < deadline:
            missing = [i for i in terminal if self.receiver.applied_for(i) == 0]
            if not missing:
                break
            time.sleep(1)
        return missing

    def report(self, verdict: audit.Verdict, missing_effects: list[str]) -> dict[str, Any]:
        receiver = self.receiver
        result = verdict.as_dict()
        result.update(
            duration_s=self.args.duration,
            rate_per_s=self.args.rate,
            background_jobs=len(self.background),
            background_created_at_provider=self.background_created,
            idempotent_creates=self.args.idempotent_creates,
            duplicate_provider_creates=len(self.orphans),
            cancelled_without_a_request=len(self.cancelled_unasked),
            webhook_deliveries=receiver.deliveries,
            webhook_events_applied=len(receiver.seen),
            webhook_redeliveries=receiver.redeliveries,
            webhook_answered_500_on_purpose=receiver.failed_on_purpose,
            webhook_signatures_rejected=receiver.rejected,
            webhook_events_missing=len(missing_effects),
            duplicate_webhook_effects=receiver.duplicate_effects,
            kills=dict(sorted(self.kills.items())),
            postgres_restarts=self.pg_restarts,
            submits_given_up=self.gave_up,
            answers=dict(sorted(self.answers.items())),
            load_average_before=[round(x, 2) for x in self.load_before],
            load_average_at_end_of_load=[round(x, 2) for x in self.load_during],
        )
        result["ok"] = (
            verdict.ok
            and receiver.duplicate_effects == 0
            and not missing_effects
            and receiver.rejected == 0
            and not self.cancelled_unasked
        )
        receiver.close()
        if verdict.lost or verdict.missing:
            result["lost_sample"] = (verdict.lost + verdict.missing)[:10]
        if verdict.double_completions:
            result["double_completion_sample"] = verdict.double_completions[:10]
        if missing_effects:
            result["webhook_missing_sample"] = missing_effects[:10]
        return result


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=1200, help="seconds of load")
    parser.add_argument("--rate", type=float, default=10, help="submits per second")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument(
        "--kill-every", type=float, default=15, help="SIGKILL a worker, dispatcher or reconciler"
    )
    parser.add_argument(
        "--pg-restart-every", type=float, default=300, help="crash-restart PostgreSQL (s)"
    )
    parser.add_argument(
        "--background-share", type=float, default=0.2, help="share of background jobs"
    )
    parser.add_argument(
        "--receiver-fail-rate",
        type=float,
        default=0.05,
        help="share of webhooks the receiver applies and then answers 500",
    )
    parser.add_argument(
        "--idempotent-creates",
        action="store_true",
        help="a provider that deduplicates creates (idempotent_creates = true, and the simulator "
        "with --idempotent); by default, as the real providers, a second create is a second job",
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
