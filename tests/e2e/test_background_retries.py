"""A background job that fails at the provider with a retryable error is retried as a new
provider job, even at a provider that deduplicates creates by Idempotency-Key (the simulator
server does): each new attempt after a provider job ended carries the next key generation,
while re-sends within one attempt keep theirs (tests/e2e/test_worker_restart.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.gateway import SECRET_ENV, WEBHOOK_SECRET, gateway

pytestmark = pytest.mark.e2e


@pytest.fixture(autouse=True)
def webhook_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SECRET_ENV, WEBHOOK_SECRET)


async def test_a_failure_at_the_provider_is_retried_as_a_new_provider_job(
    tmp_path: Path,
) -> None:
    async with gateway(tmp_path, idempotent_creates=True) as gw:
        job = await gw.submit(sim={"latency_s": 0.1, "outcome": "failed"}, max_attempts=3)
        done = await gw.terminal(job["id"], timeout_s=60)
        assert done["status"] == "failed" and done["attempt"] == 3 and done["dead_lettered"]
        creates = [
            r for r in gw.simulator.engine.requests
            if r.method == "POST" and r.path == "/v1/responses"
        ]  # fmt: skip
        keys = [r.headers["idempotency-key"] for r in creates]
        assert keys == [job["id"], f"{job['id']}:1", f"{job['id']}:2"]
        # Three attempts, three runs at the provider (not the first failure replayed twice).
        assert len(set(gw.simulator.engine.created)) == 3
        assert done["provider_job_id"] == gw.simulator.engine.created[-1]
        reasons = [e["reason"] for e in await gw.events(job["id"]) if e["to"] == "queued"]
        assert reasons == ["submitted", "retryable_error", "retryable_error"]
