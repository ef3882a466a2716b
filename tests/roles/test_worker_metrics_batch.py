"""The worker observes its per-job histograms (queue wait, provider call time) once per batch
through metrics.observe_all: the same counts, buckets and sums as one observe per job."""

from __future__ import annotations

import math
import random

import pytest
from prometheus_client import CollectorRegistry, Histogram

from jobgate import metrics, tracing
from jobgate.process.runtime import Runtime
from jobgate.services.jobs import SubmitSpec

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 1, 60)


def _samples(histogram: Histogram) -> dict[tuple[str, str], float]:
    found: dict[tuple[str, str], float] = {}
    for family in histogram.collect():
        for sample in family.samples:
            if not sample.name.endswith("_created"):
                found[(sample.name, sample.labels.get("le", ""))] = sample.value
    return found


def test_observe_all_counts_as_observe_does() -> None:
    rng = random.Random(3)
    amounts = [0.0, 0.005, 0.0050001, 0.01, 1.0, 59.99, 60.0, 61.0, 1e9, math.inf]
    amounts += [rng.uniform(0, 2) for _ in range(200)]
    one_each = Histogram("each", "", ["k"], buckets=BUCKETS, registry=CollectorRegistry())
    together = Histogram("each", "", ["k"], buckets=BUCKETS, registry=CollectorRegistry())
    for amount in amounts:
        one_each.labels("a").observe(amount)
    metrics.observe_all(together.labels("a"), amounts)
    metrics.observe_all(together.labels("a"), [])
    expected, got = _samples(one_each), _samples(together)
    assert expected.keys() == got.keys()
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, rel=1e-12), key


def _count(histogram: Histogram, *labels: str) -> float:
    return _samples(histogram.labels(*labels))[(f"{histogram._name}_count", "")]


async def test_a_batch_answered_at_once_observes_every_job(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tracing, "recording", lambda: False)  # the batch-wise path
    owner = (await runtime.tenants.create("acme")).tenant
    spec = SubmitSpec(
        endpoint="/v1/chat/completions",
        body={"model": "sim-echo", "messages": [{"role": "user", "content": "hi"}]},
        provider="sim",
    )
    for _ in range(7):
        await runtime.jobs.submit(tenant_id=owner.id, spec=spec)
    calls = _count(metrics.PROVIDER_CALL_SECONDS, "sim", "succeeded")
    waits = _count(metrics.QUEUE_WAIT_SECONDS, "acme")
    worker = runtime.worker(concurrency=16)
    done = await worker.run_once()
    assert len(done) == 7 and all(job is not None for job in done)
    assert _count(metrics.PROVIDER_CALL_SECONDS, "sim", "succeeded") == calls + 7
    assert _count(metrics.QUEUE_WAIT_SECONDS, "acme") == waits + 7
