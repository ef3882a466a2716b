"""The soak's faults, each on its own period: kill -9 of a worker, batch runner, reconciler or
dispatcher (started again at once); a crash restart of PostgreSQL; a cut of the workers' and
batch runners' database link (the proxy refuses, or holds every byte, for a few seconds); and
the broker's fault (a redis-server crash restart, or the RabbitMQ or SQS connections cut)."""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from bench.soak_stack import Stack


class Faults:
    def __init__(self, args: Any, stack: Stack, log: Callable[[str], None]) -> None:
        self.args = args
        self.stack = stack
        self.log = log
        self.rng = random.Random(None if args.seed is None else args.seed + 1)
        self.stop = threading.Event()
        self.kills: Counter[str] = Counter()
        self.pg_restarts = 0
        self.link_cuts: Counter[str] = Counter()
        self.broker_faults = 0
        # Held by a fault while it lasts: one database fault at a time, so that a link cut
        # never spans a restart (the proxy's upstream would refuse on its own).
        self.database = threading.Lock()

    def threads(self) -> list[threading.Thread]:
        loops = [
            (self.args.kill_every, self.kill_one),
            (self.args.pg_restart_every, self.restart_postgres),
            (self.args.link_cut_every, self.cut_link),
            (self.args.broker_fault_every, self.broker_fault),
        ]
        return [
            threading.Thread(target=self._every, args=(every, fault), name=fault.__name__)
            for every, fault in loops
            if every > 0
        ]

    def _every(self, every: float, fault: Callable[[], None]) -> None:
        while not self.stop.wait(every):
            fault()

    def kill_one(self) -> None:
        stack = self.stack
        victims = [*stack.workers, *stack.batch_runners, *stack.reconcilers, *stack.dispatchers]
        victim = self.rng.choice(victims)
        stack.kill(victim)
        self.kills[victim.name.split("-")[0]] += 1
        self.log(f"kill -9 {victim.name}")

    def restart_postgres(self) -> None:
        with self.database:
            self.log("pg_ctl restart -m immediate")
            try:
                self.stack.restart_postgres()
            except RuntimeError as exc:  # a restart that failed is started below
                self.log(f"restart failed: {str(exc)[:200]}")
            self.stack.ensure_postgres()
            self.pg_restarts += 1

    def cut_link(self) -> None:
        """Refuse (connections reset, connects refused) or blackhole (every byte held,
        connections hang) the database link for `link_cut_s`, alternately."""
        proxy = self.stack.db_link
        how = "refused" if sum(self.link_cuts.values()) % 2 == 0 else "blackholed"
        with self.database:
            self.log(
                f"database link of workers and batch runners {how} for {self.args.link_cut_s} s"
            )
            if how == "refused":
                proxy.refuse()
            else:
                proxy.blackhole()
            self.stop.wait(self.args.link_cut_s)
            proxy.heal()
            self.link_cuts[how] += 1

    def broker_fault(self) -> None:
        done = self.stack.broker.fault(self.args.broker_outage_s)
        if done is not None:
            self.broker_faults += 1
            self.log(done)

    def report(self) -> dict[str, Any]:
        return {
            "kills": dict(sorted(self.kills.items())),
            "postgres_restarts": self.pg_restarts,
            "database_link_cuts": dict(sorted(self.link_cuts.items())),
            "broker_faults": self.broker_faults,
        }
