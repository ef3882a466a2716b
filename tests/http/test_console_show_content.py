"""JOBGATE_DASHBOARD_SHOW_CONTENT: the job page shows a request's text only when the
operator setting allows it; by default it shows the shape."""

from __future__ import annotations

import html

import pytest

from jobgate.config import Settings
from jobgate.process.runtime import Runtime
from tests.api_server import Api
from tests.http.test_dashboard import signed_in

PROMPT = "a prompt only trusted operators may read"


@pytest.fixture(params=[False, True], ids=["shape", "content"])
def settings(request: pytest.FixtureRequest) -> Settings:
    return Settings(
        database_url="sqlite:///unused.db",
        lease_ttl_s=60,
        heartbeat_interval_s=15,
        retry_base_s=0.05,
        retry_max_s=0.05,
        shutdown_grace_s=0,
        dashboard_show_content=request.param,
    )


async def test_the_job_page_shows_content_only_when_allowed(api: Api, runtime: Runtime) -> None:
    await signed_in(api)
    key = await api.key("acme")
    job = (
        await api.http.post(
            "/v1/jobs",
            headers={"Authorization": f"Bearer {key}"},
            json={
                "endpoint": "/v1/chat/completions",
                "body": {"model": "sim-echo", "messages": [{"role": "user", "content": PROMPT}]},
            },
        )
    ).json()
    await runtime.worker().run_once()
    page = html.unescape((await api.http.get(f"/dashboard/jobs/{job['id']}")).text)
    assert 'id="job-result"' in page and 'id="attempts"' in page
    if runtime.settings.dashboard_show_content:
        assert PROMPT in page
    else:
        assert PROMPT not in page and f"[{len(PROMPT)} chars]" in page
        assert '"role": "user"' in page


def test_the_setting_reads_from_the_environment() -> None:
    from jobgate.config import load_settings

    assert load_settings({"JOBGATE_DASHBOARD_SHOW_CONTENT": "1"}).dashboard_show_content
    assert not load_settings({}).dashboard_show_content
