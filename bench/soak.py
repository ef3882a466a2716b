"""The soak checker, in the spirit of Jepsen's queue checker.

Runs jobgate's roles as separate processes on a private, throwaway PostgreSQL cluster (api, N
workers, batch runners, a reaper, the webhook dispatcher and the reconciler; bench/soak_stack.py)
over a transport (`--transport database|redis|amqp|sqs`: the real RabbitMQ behind a proxy of
the soak's own, a private redis-server, moto's SQS server), with the provider simulator server
(`jobgate simulator`) as a background-mode provider that sends signed webhooks and as a
rate-limited one. For a set duration it submits at a fixed rate a mix of plain, streaming,
background, keyed (`concurrency_key` under `max_running_per_key`) and rate-limited jobs, each
with its own Idempotency-Key and webhook URL, retried like a careful client would, and now and
then an OpenAI batch over `/v1/files`, a share of them cancelled (bench/soak_load.py). Meanwhile
it kills a random worker, batch runner, reconciler or dispatcher with SIGKILL, crash-restarts
PostgreSQL, cuts the workers' and batch runners' database link, and faults the broker
(bench/soak_faults.py); a supervisor starts again any process that exited. Then it waits for
everything to settle and counts, from the database, through the API and at the user's webhook
receiver (every count below must be 0 unless it says "reported"):

- lost jobs (accepted but missing, or not terminal at the end: each printed with its state,
  phase, last event, lease expiry and holder, and whether it is late or stuck);
- double completions, double billing, duplicate outbox rows;
- duplicate provider calls and duplicate provider creates (reported: calls are at-least-once,
  and the realistic simulator, like OpenAI and Anthropic, does not deduplicate creates);
- jobs cancelled without a request (only the jobs of a batch the soak cancelled may be);
- duplicate webhook effects and missing webhook events (each missing one printed with its
  delivery rows), signatures rejected;
- a batch whose request_counts differ from its lines or that ended in the wrong status, an
  output or error file line missing or doubled, a batch event missing, a job of a cancelled
  batch started after the cancel committed;
- a succeeded streaming job whose streamed text differs from its final text;
- with `--stream-faults SHARE`, a job meeting a fault inside its stream (rate limit, server
  error, overload, quota, stall; bench/soak_stream_faults.py) that ended otherwise than its
  fault's class (retryable: succeeded, or failed with every attempt spent; quota: failed as
  insufficient_quota), or that drew more than 60 upstream calls in a minute;
- a concurrency key over its cap (sampled, and from the event log in commit order);
- a rate limit exceeded in any window (from the claims' start times);
- a consumer left without credit while work waited (each worker's jobgate_transport_stalled).

    python -m bench.soak --duration 1200 --rate 10 --transport redis
    python -m bench.soak --duration 300 --rate 5 --stream 0.4 --stream-faults 0.5

Exits 1 when an invariant is broken. Needs the PostgreSQL server binaries (initdb, pg_ctl) and,
as root, a `postgres` user; redis-server for `redis`, RabbitMQ on 127.0.0.1:5672 for `amqp`,
moto for `sqs`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from tests.support import audit

from bench import soak_checks, soak_diagnosis, soak_stream_faults
from bench.soak_brokers import TRANSPORTS
from bench.soak_faults import Faults
from bench.soak_load import Load
from bench.soak_receiver import Receiver
from bench.soak_samples import Samples
from bench.soak_stack import Stack

_UNSETTLED = """
SELECT (SELECT count(*) FROM jobs
         WHERE state NOT IN ('succeeded', 'failed', 'cancelled', 'expired')) AS jobs,
       (SELECT count(*) FROM batches
         WHERE status NOT IN ('completed', 'failed', 'cancelled', 'expired')) AS batches
"""
_BATCH_OF_JOB = "SELECT id, metadata->>'batch_id' AS batch_id FROM jobs WHERE metadata ? 'batch_id'"
# What a worker logs when its consumer had no credit for a lease while messages waited (the
# gauge it sets meanwhile may last less than a sample).
STALL_WARNING = "the consumer has no credit left while messages wait"
# Counts that must be 0 for the run to pass.
MUST_BE_ZERO = (
    "lost",
    "double_completions",
    "double_billing",
    "duplicate_outbox_rows",
    "cancelled_without_a_request",
    "duplicate_webhook_effects",
    "webhook_events_missing",
    "webhook_signatures_rejected",
    "not_terminal",
    "batches_not_ended",
    "batches_wrong_status",
    "batch_counts_differ",
    "batch_lines_missing",
    "batch_lines_doubled",
    "batch_webhooks_missing",
    "cancelled_batch_jobs_started_after_cancel",
    "streams_differing",
    "stream_fault_outcomes_wrong",
    "stream_fault_jobs_over_call_bound",
    "key_over_cap_samples",
    "keys_over_cap",
    "rate_limit_windows_over",
    "consumers_without_credit",
)


class Soak:
    def __init__(self, args: argparse.Namespace, directory: Path) -> None:
        self.args = args
        self.directory = directory
        self.receiver = Receiver(fail_rate=args.receiver_fail_rate, seed=args.seed)
        self.load_before = os.getloadavg()
        self.load_during = self.load_before

    def log(self, message: str) -> None:
        if not self.args.quiet:
            print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)

    def run(self) -> dict[str, Any]:
        args = self.args
        began = time.monotonic()
        with Stack(args, self.directory, self.log) as stack:
            started_s = time.monotonic() - began
            self.receiver.secrets = [stack.tenant_secret()]
            self.receiver.secrets.append(stack.batch_endpoint_secret(self.receiver.url))
            load = Load(
                args,
                api_url=stack.api_url,
                key=stack.key,
                webhook_url=self.receiver.url,
                log=self.log,
            )
            faults = Faults(args, stack, self.log)
            samples = Samples(
                dsn=stack.dsn,
                key_cap=args.key_cap,
                metrics_ports=stack.metrics_ports,
                every_s=args.sample_every_s,
            )
            self.log(
                f"soak: {args.duration} s at {args.rate}/s over {args.transport}, "
                f"{args.workers} workers, {args.batch_runners} batch runners; kill -9 every "
                f"{args.kill_every} s, PostgreSQL restart every {args.pg_restart_every} s, "
                f"database link cut every {args.link_cut_every} s, broker fault every "
                f"{args.broker_fault_every} s; load average {self.load_before}"
            )
            sampler = samples.thread()
            sampler.start()
            threads = [*load.threads(), *faults.threads()]
            for thread in threads:
                thread.start()
            try:
                load.stop.wait(args.duration)
            finally:
                load.stop.set()
                faults.stop.set()
                for thread in threads:
                    thread.join()
            self.load_during = os.getloadavg()
            stack.db_link.heal()
            stack.ensure_postgres()
            self.log(
                f"load stopped; {len(load.kinds)} jobs and {len(load.batches)} batches "
                "accepted; waiting to settle"
            )
            try:
                settled_s = self.settle(stack.dsn)
                judging = time.monotonic()
                result = self.judge(stack, load)
            finally:
                samples.stop.set()
                sampler.join()
            result.update(samples.report())
            # Each stall is logged once, and the gauge shows it while it lasts (maybe less
            # than a sample): per worker, the more of the two.
            warned = stack.log_count(STALL_WARNING)
            sampled = samples.stall_episodes
            result["consumers_without_credit"] = sum(
                max(warned.get(name, 0), sampled.get(name, 0)) for name in stack.metrics_ports
            )
            result["consumer_stall_warnings"] = warned
            result.update(faults.report())
            result["started_in_s"] = round(started_s, 1)
            result["settled_in_s"] = settled_s
            result["judged_in_s"] = round(time.monotonic() - judging, 1)
            result["process_exits_restarted"] = dict(sorted(stack.exited.items()))
        return self.report(result, load)

    def settle(self, dsn: str) -> float | None:
        """Wait until every job is terminal and every batch ended: the seconds it took, or
        None when the deadline passed first."""
        start = time.monotonic()
        deadline = start + self.args.settle_timeout_s
        said = start
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, Exception):
                (row,) = soak_checks.fetch(dsn, _UNSETTLED)
                if row["jobs"] == 0 and row["batches"] == 0:
                    return round(time.monotonic() - start, 1)
                if time.monotonic() - said >= 15:
                    said = time.monotonic()
                    self.log(f"{row['jobs']} jobs not terminal, {row['batches']} batches not ended")
            time.sleep(1)
        return None

    def settle_webhooks(self, wanted: list[str]) -> list[str]:
        """Wait until each of `wanted` (jobs and batches) had its event applied at the
        receiver; the ones whose event never came."""
        deadline = time.monotonic() + self.args.settle_timeout_s
        missing = wanted
        while time.monotonic() < deadline:
            applied = self.receiver.applied()
            missing = [i for i in wanted if applied.get(i, 0) == 0]
            if not missing:
                break
            time.sleep(1)
        return missing

    def judge(self, stack: Stack, load: Load) -> dict[str, Any]:
        args = self.args
        dsn = stack.dsn
        facts = audit.job_facts(dsn)
        accepted = list(load.kinds)
        batch_of = {row["id"]: row["batch_id"] for row in soak_checks.fetch(dsn, _BATCH_OF_JOB)}
        verdict = audit.check(facts, accepted + [i for i in batch_of if i not in load.kinds])
        result: dict[str, Any] = verdict.as_dict()
        ended = [b.id for b in load.batches.values()]
        terminal = [i for i in accepted if i in facts and facts[i].terminal]
        missing_effects = self.settle_webhooks(terminal + ended)
        missing_jobs = [i for i in missing_effects if i in facts]
        result["webhook_events_missing"] = len(missing_jobs)
        result.update(soak_diagnosis.missing_webhooks(dsn, missing_jobs))
        result.update(
            soak_diagnosis.not_terminal(
                dsn,
                grace_s=args.grace_s,
                holder=stack.holder,
                kinds=load.kinds,
                waiting=stack.waiting,
            )
        )
        cancelled = {b.id for b in load.batches.values() if b.cancel_answered_at is not None}
        result["cancelled_without_a_request"] = sum(
            1
            for i, f in facts.items()
            if f.state == "cancelled" and batch_of.get(i) not in cancelled
        )
        state = httpx.get(f"{stack.simulator_url}/_simulator/state", timeout=60).json()
        recorded = {f.provider_job_id for f in facts.values() if f.provider_job_id}
        # Background creates only: a synchronous stream (the stream faults' Responses jobs)
        # creates a response on each attempt, billed and expected.
        created = state["created_background"]
        result["background_created_at_provider"] = len(created)
        result["duplicate_provider_creates"] = sum(1 for c in created if c not in recorded)
        headers = {"Authorization": f"Bearer {stack.key}"}
        with httpx.Client(base_url=stack.api_url, headers=headers, timeout=60) as client:
            applied = self.receiver.applied()
            result.update(soak_checks.check_batches(client, dsn, load.batches, applied))
            streams = [i for i in load.stream_ids() if i in facts and facts[i].state == "succeeded"]
            result.update(soak_checks.check_streams(client, streams))
        limited, batch_claims = soak_checks.claims(dsn, load.batches)
        late = soak_checks.started_after_cancel(batch_claims, load.batches)
        result["cancelled_batch_jobs_started_after_cancel"] = len(late)
        result["cancelled_batch_late_starts"] = [
            f"{start['job']} of {start['batch']}, claimed {start['after_cancel_s']} s after "
            f"the cancel's answer: "
            + "; ".join(soak_diagnosis.history(dsn, start["job"], start["cancelled_at"]))
            for start in late[:3]
        ]
        result.update(soak_checks.keys_over_cap(dsn, args.key_cap))
        result.update(soak_checks.rate_windows(limited, args.rpm))
        faulted = set(load.faulted)
        at_provider = [
            r["at"]
            for r in state["request_log"]
            if r["path"] == "/v1/chat/completions"
            and (r["idempotency_key"] or "").split(":", 1)[0] not in faulted
        ]
        provider_side = soak_checks.rate_windows(at_provider, args.rpm)
        result["rate_limit_windows_over_at_provider_reported"] = provider_side[
            "rate_limit_windows_over"
        ]
        if load.faulted:
            result.update(
                soak_stream_faults.check(
                    soak_checks.fetch(dsn, soak_stream_faults.JOBS, list(load.faulted)),
                    load.faulted,
                    state["request_log"],
                )
            )
            result["stream_faults_checked"] = sum(1 for i in streams if i in faulted)
        return result

    def report(self, result: dict[str, Any], load: Load) -> dict[str, Any]:
        receiver = self.receiver
        kinds: dict[str, int] = {}
        for kind in load.kinds.values():
            kinds[kind] = kinds.get(kind, 0) + 1
        result.update(
            transport=self.args.transport,
            seed=self.args.seed,
            duration_s=self.args.duration,
            rate_per_s=self.args.rate,
            accepted_by_kind=dict(sorted(kinds.items())),
            idempotent_creates=self.args.idempotent_creates,
            webhook_deliveries=receiver.deliveries,
            webhook_events_applied=len(receiver.seen),
            webhook_redeliveries=receiver.redeliveries,
            webhook_answered_500_on_purpose=receiver.failed_on_purpose,
            webhook_signatures_rejected=receiver.rejected,
            duplicate_webhook_effects=receiver.duplicate_effects,
            submits_given_up=load.gave_up,
            answers=dict(sorted(load.answers.items())),
            batch_answers=dict(sorted(load.batch_answers.items())),
            load_average_before=[round(x, 2) for x in self.load_before],
            load_average_at_end_of_load=[round(x, 2) for x in self.load_during],
        )
        receiver.close()
        broken = [name for name in MUST_BE_ZERO if result.get(name)]
        known = set(self.args.known_defect)
        result["broken"] = [name for name in broken if name not in known]
        result["broken_by_known_defects"] = [name for name in broken if name in known]
        result["ok"] = not result["broken"]
        return result


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--duration", type=float, default=1200, help="seconds of load")
    add("--rate", type=float, default=10, help="submits per second")
    add("--transport", choices=TRANSPORTS, default="database")
    add("--workers", type=int, default=3)
    add(
        "--batch-runners",
        type=int,
        default=1,
        help="processes of the batches role alone (each worker runs it too)",
    )
    add(
        "--worker-concurrency",
        type=int,
        default=32,
        help="calls (and RabbitMQ prefetch) per worker",
    )
    add(
        "--kill-every",
        type=float,
        default=15,
        help="SIGKILL a worker, batch runner, reconciler or dispatcher (s; 0: never)",
    )
    add(
        "--pg-restart-every", type=float, default=300, help="crash-restart PostgreSQL (s; 0: never)"
    )
    add(
        "--link-cut-every",
        type=float,
        default=120,
        help="cut the workers' database link (s; 0: never)",
    )
    add("--link-cut-s", type=float, default=4, help="how long a database link cut lasts")
    add("--broker-fault-every", type=float, default=90, help="fault the broker (s; 0: never)")
    add("--broker-outage-s", type=float, default=3, help="how long a broker fault lasts")
    add("--plain", type=float, default=0.35, help="weight of plain jobs")
    add("--stream", type=float, default=0.2, help="weight of streaming jobs")
    add("--background", type=float, default=0.15, help="weight of background jobs")
    add("--keyed", type=float, default=0.25, help="weight of jobs with a concurrency_key")
    add("--limited", type=float, default=0.04, help="weight of jobs at the rate-limited provider")
    add(
        "--stream-faults",
        type=float,
        default=0,
        metavar="SHARE",
        help="share of streaming jobs meeting a fault inside their stream, over HTTP from the "
        "simulator (rate limit, server error, overload, quota, stall)",
    )
    add("--keys", type=int, default=4, help="distinct concurrency keys")
    add("--key-cap", type=int, default=2, help="max_running_per_key")
    add("--rpm", type=int, default=30, help="the rate-limited provider's rpm")
    add("--batch-every", type=float, default=20, help="a batch every (s; 0: none)")
    add("--batch-lines", type=int, default=40)
    add("--batch-cancel-share", type=float, default=0.35)
    add("--batch-cancel-within-s", type=float, default=4)
    add(
        "--receiver-fail-rate",
        type=float,
        default=0.05,
        help="share of webhooks the receiver applies and then answers 500",
    )
    add(
        "--idempotent-creates",
        action="store_true",
        help="a provider that deduplicates creates (the simulator with --idempotent)",
    )
    add("--lease-ttl-s", type=float, default=5)
    add("--sweep-after-s", type=float, default=15, help="JOBGATE_TRANSPORT_SWEEP_AFTER_S")
    add("--max-latency-s", type=float, default=2, help="simulated call time")
    add("--submit-budget-s", type=float, default=60, help="retry a submit for")
    add("--settle-timeout-s", type=float, default=180)
    add("--grace-s", type=float, default=10, help="between the two looks at unfinished jobs")
    add("--sample-every-s", type=float, default=0.5)
    add(
        "--known-defect",
        action="append",
        default=[],
        choices=MUST_BE_ZERO,
        metavar="COUNT",
        help="a count an open defect still breaks: reported, but the run passes (repeatable)",
    )
    add("--seed", type=int, default=None)
    add("--keep", type=Path, default=None, help="keep the processes' logs in this directory")
    add("--json", action="store_true", help="print only the JSON result")
    add("--quiet", action="store_true")
    args = parser.parse_args(argv)
    if args.json:
        args.quiet = True
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
        result = Soak(args, args.keep).run()
    else:
        with tempfile.TemporaryDirectory(prefix="jobgate-soak-") as directory:
            result = Soak(args, Path(directory)).run()
    if args.json:
        print(json.dumps(result))
    else:
        width = max(len(k) for k in result)
        for name, value in result.items():
            if isinstance(value, list) and value and isinstance(value[0], str):
                print(f"{name}:")
                for line in value:
                    print(f"    {line}")
            else:
                print(f"{name:<{width}}  {value}")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
