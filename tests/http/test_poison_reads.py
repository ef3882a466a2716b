"""Reading, listing, cancelling and deleting a job never answer 5xx because of a value stored in
its row (a time past year 9999, JSON that is not an object or not JSON, a non-finite timeout),
on the native and the OpenAI-compatible surface, in every state. Both backends."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from jobgate.providers.simulated import RESPONSES
from jobgate.storage.protocol import Storage
from tests.api_server import Api
from tests.storage.helpers import new_job, submit_one
from tests.storage.poison_rows import far_future, json_text, poisons, poke

_ids = itertools.count(1)


def _variants(storage: Storage) -> dict[str, dict[str, str]]:
    found = dict(poisons(storage))
    inf = "'Infinity'" if storage.dialect == "postgres" else "9e999"
    found["timeout_infinite"] = {"execution_timeout_s": inf}
    found["every_time_far"] = {
        column: far_future(storage)
        for column in ("run_at", "created_at", "updated_at", "expires_at", "deadline_at")
    }
    found["result_not_an_object"] = {
        "state": "'succeeded'",
        "event_seq": "event_seq + 1",
        "result": json_text(storage, "[1, 2]"),
        "usage": json_text(storage, '"lots"'),
        "completed_at": far_future(storage),
    }
    beyond = '{"big": 123456789012345678901234567890, "far": 1e999}'
    if storage.dialect == "sqlite":  # jsonb refuses a lone surrogate
        beyond = '{"big": 123456789012345678901234567890, "lone\\ud800": "x\\udc00"}'
    found["json_beyond_orjson"] = {"metadata": json_text(storage, beyond)}
    found["error_not_an_object"] = {
        "state": "'failed'",
        "event_seq": "event_seq + 1",
        "error": json_text(storage, "17"),
    }
    return found


@pytest.mark.parametrize("surface", ["jobs", "responses"])
async def test_no_stored_value_makes_a_read_answer_5xx(api: Api, surface: str) -> None:
    storage = api.runtime.storage
    key = await api.key("acme")
    tenant = await storage.tenant_get(name="acme")
    assert tenant is not None
    headers = {"Authorization": f"Bearer {key}"}
    ids: dict[str, str] = {}
    for name, columns in _variants(storage).items():
        fields: dict[str, Any] = {}
        if surface == "responses":
            fields = {
                "id": f"resp_{next(_ids):08d}",
                "api": "responses",
                "endpoint": RESPONSES,
                "request": {"model": "sim-echo", "input": "hi"},
            }
        job = (await submit_one(storage, job=new_job(tenant, **fields))).job
        await poke(storage, "jobs", job.id, **columns)
        ids[name] = job.id

    http = api.http
    listed = await http.get("/v1/jobs", params={"limit": 100}, headers=headers)
    assert listed.status_code == 200, listed.text
    assert {job["id"] for job in listed.json()["data"]} == set(ids.values())
    for name, job_id in ids.items():
        paths = [f"/v1/jobs/{job_id}", f"/v1/jobs/{job_id}/events"]
        if surface == "responses":
            paths.append(f"/v1/responses/{job_id}")
        for path in paths:
            answer = await http.get(path, headers=headers)
            assert answer.status_code == 200, (name, path, answer.text)
        cancelled = await http.post(f"/v1/jobs/{job_id}/cancel", headers=headers)
        assert cancelled.status_code == 200, (name, cancelled.text)
        deleted = await http.delete(f"/v1/jobs/{job_id}", headers=headers)
        assert deleted.status_code == 200, (name, deleted.text)
