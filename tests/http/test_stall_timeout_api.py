"""`stall_timeout_s` on submit, over real HTTP on both stores: a value in range is kept with the
job (never sent to the provider), one outside it is a 400 problem naming it; the setting is
JOBGATE_STALL_TIMEOUT_S."""

from __future__ import annotations

import pytest

from jobgate.config import load_settings
from jobgate.providers import streaming
from tests.api_server import Api

BODY = {"model": "sim-echo", "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.asyncio
async def test_a_stall_timeout_is_kept_with_the_job(api: Api) -> None:
    headers = {"Authorization": f"Bearer {await api.key('acme')}"}
    answer = await api.http.post(
        "/v1/jobs",
        json={"endpoint": "/v1/chat/completions", "body": BODY, "stream": True,
              "stall_timeout_s": 30},
        headers=headers,
    )  # fmt: skip
    assert answer.status_code == 202, answer.text
    job = await api.runtime.storage.job_get(job_id=answer.json()["id"])
    assert job is not None and job.request is not None
    assert streaming.stall_timeout_s(job.request, 120.0) == 30.0


@pytest.mark.asyncio
async def test_a_stall_timeout_out_of_range_is_refused(api: Api) -> None:
    headers = {"Authorization": f"Bearer {await api.key('acme')}"}
    for value in (0, 0.5, -1, 86_401, "soon"):
        answer = await api.http.post(
            "/v1/jobs",
            json={"endpoint": "/v1/chat/completions", "body": BODY, "stall_timeout_s": value},
            headers=headers,
        )
        assert answer.status_code == 400, answer.text
        assert answer.headers["content-type"].startswith("application/problem+json")
        assert "stall_timeout_s" in answer.text


def test_the_setting_reads_its_variable() -> None:
    assert load_settings({}).stall_timeout_s == 120.0
    assert load_settings({"JOBGATE_STALL_TIMEOUT_S": "45"}).stall_timeout_s == 45.0
