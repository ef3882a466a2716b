"""The console explains waits and toggles pauses, on both backends: a queued job's page says why
it waits for each reason the claim can have, the overview counts queued jobs per reason, and the
pauses page pauses and resumes claims through a same-origin form."""

from __future__ import annotations

import re

import pytest
from markupsafe import escape

from jobgate.config import Settings
from jobgate.domain import waiting
from jobgate.process.runtime import Runtime
from jobgate.storage.protocol import Storage
from jobgate.testing import FakeClock
from tests import waiting_scenarios as held
from tests.api_server import Api
from tests.http.test_dashboard import signed_in


@pytest.fixture
def runtime(storage: Storage, settings: Settings, clock: FakeClock) -> Runtime:
    return held.limited_runtime(storage, settings, clock)


def reasons_counted(page: str) -> dict[str, int]:
    rows = re.findall(r'<tr data-reason="(\w+)">.*?<td class="num">(\d+)</td>', page, re.S)
    return {reason: int(count) for reason, count in rows}


@pytest.mark.parametrize("reason", waiting.REASONS)
async def test_the_job_page_and_the_overview_explain_each_reason(
    api: Api, clock: FakeClock, reason: str
) -> None:
    found = await held.SCENARIOS[reason](api, clock)
    detail = held.steady((await found.tenant.read(found.job_id))["waiting"]["detail"])
    await signed_in(api)
    page = held.steady((await api.http.get(f"/dashboard/jobs/{found.job_id}")).text)
    assert f'id="job-waiting" data-reason="{reason}"' in page
    assert str(escape(detail)) in page
    live = (await api.http.get(f"/dashboard/live/jobs/{found.job_id}")).text
    assert f'data-reason="{reason}"' in live
    overview = (await api.http.get("/dashboard/live/overview")).text
    assert reasons_counted(overview).get(reason, 0) >= 1, overview


@pytest.mark.parametrize("limit", list(held.KEY_SCENARIOS))
async def test_the_job_page_and_the_overview_name_a_limit_per_key(
    api: Api, clock: FakeClock, limit: str
) -> None:
    found = await held.KEY_SCENARIOS[limit](api, clock)
    detail = held.steady((await found.tenant.read(found.job_id))["waiting"]["detail"])
    assert limit in detail
    await signed_in(api)
    page = held.steady((await api.http.get(f"/dashboard/jobs/{found.job_id}")).text)
    assert f'id="job-waiting" data-reason="{found.reason}"' in page
    assert str(escape(detail)) in page
    overview = (await api.http.get("/dashboard/live/overview")).text
    assert reasons_counted(overview).get(found.reason, 0) >= 1, overview


async def test_the_overview_counts_every_queued_job_once(api: Api, clock: FakeClock) -> None:
    found = await held.tenant_cap(api, clock)  # one running, one held by the cap
    for _ in range(3):
        await found.tenant.submit(run_at=int(clock.now().timestamp()) + 600)
    await signed_in(api)
    counted = reasons_counted((await api.http.get("/dashboard")).text)
    assert counted == {"scheduled": 3, "tenant_cap": 1}


async def test_a_job_nothing_holds_says_so(api: Api) -> None:
    acme = await held.tenant(api)
    job_id = await acme.submit()
    await signed_in(api)
    page = (await api.http.get(f"/dashboard/jobs/{job_id}")).text
    assert 'id="job-waiting" data-reason=""' in page and "a worker may claim it now" in page


async def test_the_pauses_page_pauses_and_resumes(api: Api) -> None:
    acme = await held.tenant(api)
    job_id = await acme.submit()
    await signed_in(api)
    assert "Nothing is paused." in (await api.http.get("/dashboard/pauses")).text
    paused = await api.http.post(
        "/dashboard/pauses",
        data={"provider": "sim", "model": "", "tenant": "acme", "reason": "deploy"},
    )
    assert paused.status_code == 303 and paused.headers["location"] == "/dashboard/pauses"
    (pause,) = await api.runtime.storage.pause_list()
    assert (pause.provider, pause.model, pause.reason, pause.created_by) == (
        "sim",
        None,
        "deploy",
        "ada",
    )
    page = (await api.http.get("/dashboard/pauses")).text
    assert f'data-pause="{pause.id}"' in page and "deploy" in page
    assert (await acme.read(job_id))["waiting"]["reason"] == "paused"
    overview = (await api.http.get("/dashboard/live/overview")).text
    assert '<a href="/dashboard/pauses">1</a>' in overview

    resumed = await api.http.post(f"/dashboard/pauses/{pause.id}/resume")
    assert resumed.status_code == 303
    assert await api.runtime.storage.pause_list() == []
    assert (await acme.read(job_id))["waiting"] is None


async def test_a_pause_of_an_unknown_provider_is_refused_on_the_page(api: Api) -> None:
    await signed_in(api)
    refused = await api.http.post("/dashboard/pauses", data={"provider": "nope"})
    assert refused.status_code == 400
    assert 'id="pause-error"' in refused.text and "unknown provider" in refused.text
    assert await api.runtime.storage.pause_list() == []


async def test_pause_forms_need_a_session_and_the_same_origin(api: Api) -> None:
    refused = await api.http.post("/dashboard/pauses", data={"provider": "sim"})
    assert refused.status_code == 401
    await signed_in(api)
    foreign = await api.http.post(
        "/dashboard/pauses", data={"provider": "sim"}, headers={"Origin": "https://evil.example"}
    )
    assert foreign.status_code == 401
    assert await api.runtime.storage.pause_list() == []
    missing = await api.http.post("/dashboard/pauses/pause_missing/resume")
    assert missing.status_code == 404
