"""Idempotency over real HTTP: 50 concurrent submits with one Idempotency-Key make one job, on
the all-in-one SQLite process and on a PostgreSQL API process; a different body is 422; another
tenant's identical request gets its own job."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from tests.e2e.support import create_tenant, job_body
from tests.support import audit
from tests.support.processes import ProcessHarness

pytestmark = pytest.mark.e2e

CONCURRENCY = 50


async def _submit_all(url: str, key: str, body: dict[str, Any], idem: str) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=CONCURRENCY)
    headers = {"Authorization": f"Bearer {key}", "Idempotency-Key": idem}
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:
        start = asyncio.Event()

        async def one() -> httpx.Response:
            await start.wait()
            while True:
                response = await client.post("/v1/jobs", json=body, headers=headers)
                if response.status_code != 409:  # still inside the first submit: retry
                    return response
                assert response.headers["Retry-After"] == "1"
                await asyncio.sleep(0.05)

        tasks = [asyncio.create_task(one()) for _ in range(CONCURRENCY)]
        await asyncio.sleep(0.05)
        start.set()
        return await asyncio.gather(*tasks)


def _check_one_job(url: str, db_url: str, key: str, other_key: str) -> None:
    body = job_body("once only")
    responses = asyncio.run(_submit_all(url, key, body, "order-42"))
    assert {r.status_code for r in responses} == {202}, [r.text for r in responses][:3]
    ids = {r.json()["id"] for r in responses}
    assert len(ids) == 1
    originals = [r for r in responses if r.headers.get("Idempotent-Replayed") != "true"]
    assert len(originals) == 1
    (job_id,) = ids
    assert list(audit.job_facts(db_url)) == [job_id]  # one row in the whole database

    with httpx.Client(base_url=url, timeout=30) as client:
        reused = client.post(
            "/v1/jobs",
            json=job_body("another body"),
            headers={"Authorization": f"Bearer {key}", "Idempotency-Key": "order-42"},
        )
        assert reused.status_code == 422
        assert reused.json()["error"]["code"] == "idempotency_key_reused"
        theirs = client.post(
            "/v1/jobs",
            json=body,
            headers={"Authorization": f"Bearer {other_key}", "Idempotency-Key": "order-42"},
        )
        assert theirs.status_code == 202 and "Idempotent-Replayed" not in theirs.headers
        assert theirs.json()["id"] != job_id
    assert len(audit.job_facts(db_url)) == 2


def test_50_concurrent_idempotent_submits_make_one_job_sqlite(
    harness: ProcessHarness, tmp_path: Any
) -> None:
    db_url = f"sqlite:///{tmp_path}/jobgate.db"
    harness.env["JOBGATE_DATABASE_URL"] = db_url
    serve = harness.start("serve")
    assert serve.url is not None
    other = harness.create_tenant("globex")
    _check_one_job(serve.url, db_url, harness.default_api_key(serve.url), other)


def test_50_concurrent_idempotent_submits_make_one_job_postgres(
    harness: ProcessHarness, pg_dsn: str
) -> None:
    harness.env["JOBGATE_DATABASE_URL"] = pg_dsn
    api = harness.start("api")
    assert api.url is not None
    _check_one_job(api.url, pg_dsn, create_tenant(pg_dsn, "acme"), harness.create_tenant("globex"))
