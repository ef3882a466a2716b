"""How big each measurement is: `full` reproduces docs/benchmarks.md, `quick` is a few-minute
smoke run with the same shape, `smoke` is the smallest jobgate-only run (the test suite's)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Sizes:
    name: str
    drain_jobs: int
    # jobgate worker processes x concurrency per process; the best is reported.
    jobgate_drain_configs: tuple[tuple[int, int], ...]
    # PgQueuer: processes x batch size (5 queue managers per process, as PgQueuer's own tool).
    pgqueuer_drain_configs: tuple[tuple[int, int], ...]
    # procrastinate: processes x concurrency.
    procrastinate_drain_configs: tuple[tuple[int, int], ...]
    enqueue_jobs: int
    enqueue_concurrency: tuple[int, ...]  # callers inserting one job per call at once
    enqueue_batch: int  # jobs per call for batched enqueue
    # Jobs enqueued in batches (and through the bulk route): more than the single enqueues,
    # whose calls are far slower, so that the batched figure is not a few tenths of a second.
    enqueue_batched_jobs: int
    http_seconds: float
    http_submit_rates: tuple[int, ...]  # offered requests per second (open loop)
    http_status_rates: tuple[int, ...]
    http_connections: int
    wake_trials: int
    longpoll_clients: int
    longpoll_wait_s: int
    # Long calls held by one worker process: how many (one measurement each), how long each
    # call waits on the simulated provider, and the measuring window once all are running.
    inflight_calls: tuple[int, ...]
    inflight_latency_s: float
    inflight_window_s: float
    # The history section: finished jobs loaded (4 events each), the days they span, and the
    # queued backlog added ahead of the 1,000 jobs whose status is read.
    history_jobs: int = 5_000_000
    history_days: int = 7
    history_backlog: int = 999_000


FULL = Sizes(
    name="full",
    drain_jobs=20_000,
    jobgate_drain_configs=((1, 64), (2, 64), (2, 256)),
    pgqueuer_drain_configs=((1, 10), (1, 50), (1, 100), (1, 250), (2, 100)),
    procrastinate_drain_configs=((1, 1), (1, 10), (1, 50)),
    enqueue_jobs=5_000,
    enqueue_concurrency=(1, 32),
    enqueue_batch=500,
    enqueue_batched_jobs=20_000,
    http_seconds=10.0,
    http_submit_rates=(250, 500, 1000, 2000, 3000),
    http_status_rates=(250, 500, 1000, 2000, 3000),
    http_connections=256,
    wake_trials=200,
    longpoll_clients=10_000,
    longpoll_wait_s=60,
    inflight_calls=(10_000, 50_000),
    inflight_latency_s=120,
    inflight_window_s=45,
)

QUICK = Sizes(
    name="quick",
    drain_jobs=2_000,
    jobgate_drain_configs=((2, 64),),
    pgqueuer_drain_configs=((1, 10), (1, 100)),
    procrastinate_drain_configs=((1, 10), (1, 50)),
    enqueue_jobs=1_000,
    enqueue_concurrency=(1, 32),
    enqueue_batch=500,
    enqueue_batched_jobs=2_000,
    http_seconds=3.0,
    http_submit_rates=(500, 1000),
    http_status_rates=(500, 1000),
    http_connections=128,
    wake_trials=40,
    longpoll_clients=1_000,
    longpoll_wait_s=60,
    inflight_calls=(10_000,),
    inflight_latency_s=120,
    inflight_window_s=32,
    history_jobs=200_000,
    history_days=4,
    history_backlog=99_000,
)

SMOKE = Sizes(
    name="smoke",
    drain_jobs=200,
    jobgate_drain_configs=((1, 16),),
    pgqueuer_drain_configs=((1, 10),),
    procrastinate_drain_configs=((1, 10),),
    enqueue_jobs=100,
    enqueue_concurrency=(8,),
    enqueue_batch=50,
    enqueue_batched_jobs=100,
    http_seconds=1.0,
    http_submit_rates=(50,),
    http_status_rates=(50,),
    http_connections=8,
    wake_trials=5,
    longpoll_clients=20,
    longpoll_wait_s=60,
    inflight_calls=(100,),
    inflight_latency_s=15,
    inflight_window_s=3,
    history_jobs=5_000,
    history_days=3,
    history_backlog=4_000,
)

BY_NAME = {sizes.name: sizes for sizes in (FULL, QUICK, SMOKE)}
