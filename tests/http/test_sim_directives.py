"""Every `sim` directive docs/providers.md lists is accepted at the edge (the schema of
POST /v1/jobs and POST /v1/responses), and reaches the simulated model."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from jobgate.testing.waiting import eventually
from tests.api_server import Api

pytestmark = pytest.mark.asyncio


async def _submit(api: Api, key: str, sim: dict[str, Any]) -> Any:
    body = {"model": "sim-echo", "messages": [{"role": "user", "content": "x"}], "sim": sim}
    answer = await api.http.post(
        "/v1/jobs",
        headers={"Authorization": f"Bearer {key}"},
        json={"endpoint": "/v1/chat/completions", "body": body},
    )
    return answer


@pytest.mark.parametrize(
    "sim",
    [
        {"fail_with": "quota"},
        {"fail_with": "stream_rate_limit", "retry_after_s": 2},
        {"fail_with": "stream_stall"},
        {"outcome": "rejected"},
        {"tool_calls": 2},
        {"chunks": 3, "progress": True},
    ],
)
async def test_every_documented_directive_is_accepted(api: Api, sim: dict[str, Any]) -> None:
    key = await api.key("acme")
    body: dict[str, Any] = {"sim": sim}
    if "tool_calls" in sim:
        body["tools"] = [{"type": "function", "function": {"name": "f"}}]
    answer = await api.http.post(
        "/v1/jobs",
        headers={"Authorization": f"Bearer {key}"},
        json={
            "endpoint": "/v1/chat/completions",
            "body": {"model": "sim-echo", "messages": [{"role": "user", "content": "x"}], **body},
        },
    )
    assert answer.status_code == 202, answer.text


async def test_a_quota_fault_fails_the_job_as_insufficient_quota(api: Api) -> None:
    key = await api.key("acme")
    answer = await _submit(api, key, {"fail_with": "quota"})
    assert answer.status_code == 202, answer.text
    worker = api.runtime.worker()
    task = asyncio.create_task(worker.run())
    try:
        headers = {"Authorization": f"Bearer {key}"}
        url = f"/v1/jobs/{answer.json()['id']}"
        seen: dict[str, Any] = {}

        async def failed() -> bool:
            seen.update((await api.http.get(url, headers=headers)).json())
            return bool(seen["status"] == "failed")

        await eventually(failed, what="the job failed")
        job = seen
    finally:
        worker.request_stop()
        await asyncio.wait_for(task, 30)
    assert job["error"]["code"] == "insufficient_quota"
    assert job["error"]["type"] == "insufficient_quota"


@pytest.mark.parametrize(
    ("sim", "param"),
    [
        ({"tool_calls": 17}, "body.sim.tool_calls"),
        ({"tool_calls": "2"}, "body.sim.tool_calls"),
        ({"fail_with": "meteor"}, "body.sim.fail_with"),
    ],
)
async def test_directives_out_of_range_are_refused(
    api: Api, sim: dict[str, Any], param: str
) -> None:
    answer = await _submit(api, await api.key("acme"), sim)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == param
