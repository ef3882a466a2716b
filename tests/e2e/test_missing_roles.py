"""No role is silently missing, with real processes: `jobgate worker` runs the batches role too,
so the README's PostgreSQL processes finish a batch; work that no live process would take says
`waiting.reason = "no_worker"` (a job without a worker, a batch without the batches role) and
/readyz names the role (`missing_roles`); a stopped worker is missing at once."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.e2e.support import Api, create_tenant, job_body
from tests.support.processes import ProcessHarness, wait_until

pytestmark = [pytest.mark.e2e]


def _batch(api: Api, lines: int) -> str:
    """Upload a JSONL file of `lines` requests and create a batch over it."""
    content = "".join(
        json.dumps(
            {
                "custom_id": f"line-{n}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {"model": "sim-echo", "messages": [{"role": "user", "content": f"{n}"}]},
            }
        )
        + "\n"
        for n in range(lines)
    )
    uploaded = api.client.post(
        "/v1/files", data={"purpose": "batch"}, files={"file": ("in.jsonl", content.encode())}
    )
    assert uploaded.status_code == 200, uploaded.text
    created = api.client.post(
        "/v1/batches",
        json={
            "input_file_id": uploaded.json()["id"],
            "endpoint": "/v1/chat/completions",
            "completion_window": "24h",
        },
    )
    assert created.status_code == 200, created.text
    batch_id: str = created.json()["id"]
    return batch_id


def _ready(api: Api) -> dict[str, Any]:
    answer = httpx.get(f"{api.url}/readyz", timeout=10)
    assert answer.status_code == 200, answer.text
    ready: dict[str, Any] = answer.json()
    return ready


@pytest.mark.postgres
def test_the_worker_runs_batches_and_absent_roles_are_named(
    harness: ProcessHarness, pg_dsn: str
) -> None:
    harness.env.update(JOBGATE_DATABASE_URL=pg_dsn)
    api_process = harness.start("api")
    assert api_process.url is not None
    api = Api(api_process.url, create_tenant(pg_dsn, "acme"))

    # Only an API: the job and the batch say what they wait for, and so does readiness.
    job_id = api.submit(job_body("first"))
    waiting = api.get(job_id)["waiting"]
    assert waiting["reason"] == "no_worker" and "jobgate worker" in waiting["detail"]
    batch_id = _batch(api, 3)
    batch = api.client.get(f"/v1/batches/{batch_id}").json()
    assert batch["status"] == "validating"
    assert batch["waiting"]["reason"] == "no_worker" and "batches" in batch["waiting"]["detail"]
    ready = _ready(api)
    assert ready["status"] == "ready"
    assert {"worker", "batches"} <= set(ready["missing_roles"])
    assert len(ready["warnings"]) == len(ready["missing_roles"])

    # The README's worker (no --roles): it runs the batches role too.
    worker = harness.start("worker")
    harness.start("reaper")

    def settled() -> bool:
        job = api.get(job_id)
        found = api.client.get(f"/v1/batches/{batch_id}").json()
        return bool(job["status"] == "succeeded" and found["status"] == "completed")

    wait_until(settled, timeout_s=60, what="the job and the batch to finish")
    assert "missing_roles" not in _ready(api)

    # A worker that stops says so at once (not a stale period later).
    worker.terminate()
    late = api.submit(job_body("after the worker"))
    wait_until(
        lambda: (api.get(late)["waiting"] or {}).get("reason") == "no_worker",
        timeout_s=10,
        what="the job to say that no worker runs",
    )
    assert "worker" in _ready(api)["missing_roles"]


def test_roles_chosen_explicitly_are_all_that_runs(harness: ProcessHarness) -> None:
    serve = harness.start("serve", "--roles", "api,worker,reaper")
    assert serve.url is not None
    api = Api(serve.url, harness.default_api_key(serve.url))
    job_id = api.submit(job_body("runs"))
    batch_id = _batch(api, 2)
    wait_until(
        lambda: api.get(job_id)["status"] == "succeeded", timeout_s=30, what="the job to run"
    )
    batch = api.client.get(f"/v1/batches/{batch_id}").json()
    assert batch["status"] == "validating"  # nothing expands it
    assert batch["waiting"]["reason"] == "no_worker"
    assert "batches" in batch["waiting"]["detail"]
    assert _ready(api)["missing_roles"] == ["batches"]
