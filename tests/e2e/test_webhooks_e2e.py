"""Webhooks end to end with real `jobgate` processes and a real local receiver: exactly one
verified event per terminal transition through a receiver outage, and a dispatcher killed
(SIGKILL) between sending and recording that loses nothing."""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from jobgate.client.webhooks import verify_webhook
from jobgate.domain.job import Lease
from jobgate.domain.states import JobState
from jobgate.domain.verdicts import Finish
from jobgate.storage.factory import storage_for_url
from jobgate.storage.records import NewWebhookEndpoint
from jobgate.testing.receiver import Received, Reply, WebhookReceiver
from tests.conftest import run_sync
from tests.storage.helpers import finish_one, new_job, submit_one

pytestmark = pytest.mark.e2e

JOBGATE = shutil.which("jobgate", path=str(Path(sys.executable).parent)) or "jobgate"
SECRET = "whsec_" + "a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2U="


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'jobgate.db'}"
    dsn: str = request.getfixturevalue("pg_dsn")
    return dsn


class Process:
    """A jobgate process whose output is collected line by line."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.popen = subprocess.Popen(
            [JOBGATE, *args],
            env={**os.environ, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.output: list[str] = []
        self._pump_thread = threading.Thread(target=self._pump, daemon=True)
        self._pump_thread.start()

    def _pump(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            self.output.append(line)
            self.lines.put(line)

    def wait_for_line(self, pattern: str, timeout_s: float = 30) -> re.Match[str]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                if self.popen.poll() is not None:
                    break
                continue
            match = re.search(pattern, line)
            if match:
                return match
        raise AssertionError(f"no line matching {pattern!r}; output:\n{''.join(self.output)}")

    def wait(self, timeout_s: float) -> int:
        """The exit status, once the process is gone and its output read to the end."""
        code = self.popen.wait(timeout_s)
        self._pump_thread.join(10)
        assert self.popen.stdout is not None
        self.popen.stdout.close()
        return code

    def stop(self) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                return self.wait(20)
            except subprocess.TimeoutExpired:
                self.popen.kill()
        return self.wait(10)


def env_for(database_url: str, tmp_path: Path, **more: str) -> dict[str, str]:
    return {
        "JOBGATE_DATABASE_URL": database_url,
        "JOBGATE_CREDENTIALS_PATH": str(tmp_path / "credentials.json"),
        "JOBGATE_WEBHOOK_ALLOW_HTTP": "1",
        "JOBGATE_WEBHOOK_ALLOW_CIDRS": "127.0.0.0/8",
        "JOBGATE_WEBHOOK_RETRY_PROFILE": "short",
        "JOBGATE_LOG_LEVEL": "warning",
        **more,
    }


def wait_until(condition: Any, timeout_s: float = 60, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver() as running:
        yield running


def test_one_verified_event_per_terminal_transition_through_an_outage(
    database_url: str, tmp_path: Path, receiver: WebhookReceiver
) -> None:
    outage = 3
    answered: list[tuple[Received, int]] = []

    def script(request: Received, index: int) -> Reply:
        reply = Reply(503 if index < outage else 200)
        answered.append((request, reply.status))
        return reply

    receiver.script = script
    env = env_for(database_url, tmp_path)
    created = subprocess.run(
        [JOBGATE, "tenants", "create", "acme", "--json"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    key = json.loads(created.stdout)["api_key"]
    server = Process(["serve", "--port", "0"], env)
    try:
        url = server.wait_for_line(r"listening on (http://\S+)").group(1)
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}) as api:
            endpoint = api.post("/v1/webhook_endpoints", json={"url": receiver.url}).json()
            tenant_secret = api.get("/v1/webhook_secret").json()["secret"]
            body = {"model": "sim-echo", "messages": [{"role": "user", "content": "hi"}]}
            jobs = []
            for _ in range(3):
                submitted = api.post(
                    "/v1/jobs", json={"endpoint": "/v1/chat/completions", "body": body}
                )
                assert submitted.status_code == 202, submitted.text
                jobs.append(submitted.json()["id"])
            failing = {**body, "sim": {"fail_with": "invalid_request"}}
            own_url = f"{receiver.url}?job=own"
            submitted = api.post(
                "/v1/jobs",
                json={
                    "endpoint": "/v1/chat/completions",
                    "body": failing,
                    "webhook": {"url": own_url},
                },
            )
            jobs.append(submitted.json()["id"])
            expected = 4 + 1  # four events to the endpoint, one to the job's own URL

            def accepted() -> list[Received]:
                return [request for request, status in answered if status == 200]

            wait_until(lambda: len(accepted()) >= expected, 90, "every event to be accepted")
            time.sleep(1.5)  # anything more would be a duplicate
            assert len(accepted()) == expected
            by_target: Counter[tuple[str, str]] = Counter()
            for request in accepted():
                own = request.path.endswith("?job=own")
                payload = verify_webhook(
                    request.body, request.headers, tenant_secret if own else endpoint["secret"]
                )
                assert payload["id"] == request.headers["webhook-id"]
                by_target[(payload["data"]["id"], payload["type"])] += 1
            assert by_target == Counter(
                {(job_id, "job.succeeded"): 1 for job_id in jobs[:3]}
                | {(jobs[3], "job.failed"): 2}  # to the endpoint and to the job's URL
            )
            # The outage answers were retried under the same ids, never as new events.
            ids_seen = {r.headers["webhook-id"] for r, _ in answered}
            assert len(ids_seen) == 4
            deliveries = api.get(f"/v1/jobs/{jobs[0]}/deliveries").json()["data"]
            assert deliveries and all(d["status"] == "succeeded" for d in deliveries)
    finally:
        assert server.stop() == 0, "".join(server.output)


def test_dispatcher_killed_after_sending_delivers_again_with_the_same_id(
    database_url: str, tmp_path: Path, receiver: WebhookReceiver
) -> None:
    job_id, outbox_id = run_sync(_prepare_one_delivery(database_url, receiver.url))
    env = env_for(database_url, tmp_path, JOBGATE_WEBHOOK_TIMEOUT_S="1")

    doomed = Process(
        ["dispatcher"], {**env, "JOBGATE_FAILPOINTS": "after_webhook_sent_before_mark=kill@1"}
    )
    assert doomed.wait(60) == -signal.SIGKILL, "".join(doomed.output)
    assert "after_webhook_sent_before_mark" in "".join(doomed.output)
    assert receiver.count == 1  # it was sent ...
    row, attempts = run_sync(_delivery_state(database_url, job_id))
    assert (row.state, row.attempts) == ("pending", 1) and attempts == []  # ... not recorded

    survivor = Process(["dispatcher"], env)
    try:
        wait_until(lambda: receiver.count >= 2, 60, "the delivery to be sent again")
        wait_until(
            lambda: run_sync(_delivery_state(database_url, job_id))[0].state == "succeeded",
            30,
            "the delivery to be recorded",
        )
    finally:
        assert survivor.stop() == 0, "".join(survivor.output)
    first, second = receiver.received[:2]
    assert first.headers["webhook-id"] == second.headers["webhook-id"]
    assert first.body == second.body
    for request in (first, second):
        assert verify_webhook(request.body, request.headers, SECRET)["data"]["id"] == job_id
    row, attempts = run_sync(_delivery_state(database_url, job_id))
    assert row.id == outbox_id and (row.state, row.attempts) == ("succeeded", 2)
    assert [(a.attempt, a.status_code) for a in attempts] == [(2, 200)]
    assert receiver.count == 2


async def _prepare_one_delivery(database_url: str, url: str) -> tuple[str, str]:
    storage = storage_for_url(database_url)
    await storage.open()
    try:
        await storage.migrate()
        tenant = await storage.tenant_create(tenant_id="ten_e2e", name="e2e", webhook_secret=SECRET)
        await storage.webhook_endpoint_create(
            endpoint=NewWebhookEndpoint(id="ep_e2e", tenant_id=tenant.id, url=url, secret=SECRET)
        )
        job = (await submit_one(storage, job=new_job(tenant))).job
        [claimed] = await storage.job_claim(worker_id="w", limit=1, lease_ttl_s=60)
        await finish_one(
            storage,
            finish=Finish(
                lease=Lease(job.id, claimed.lease_token or ""),
                state=JobState.SUCCEEDED,
                reason="completed",
                result={"ok": True},
            ),
        )
        [row] = await storage.outbox_for_job(job_id=job.id)
        return job.id, row.id
    finally:
        await storage.close()


async def _delivery_state(database_url: str, job_id: str) -> tuple[Any, list[Any]]:
    storage = storage_for_url(database_url)
    await storage.open()
    try:
        [row] = await storage.outbox_for_job(job_id=job_id)
        return row, await storage.delivery_attempts_for_job(job_id=job_id)
    finally:
        await storage.close()
