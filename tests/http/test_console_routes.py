"""The console's routes over real HTTP: live fragments and bulk actions need a
session, a bulk action is a same-origin POST after a count that changes nothing, the script
is jobgate's own (no inline script, no CDN), and bad input is a 400, never a 5xx."""

from __future__ import annotations

import re
from typing import Any

import pytest

from jobgate.domain import ranges
from jobgate.domain.states import JobState
from jobgate.http.console import routes
from jobgate.testing import FakeClock
from tests.api_server import Api
from tests.http.test_dashboard import signed_in


async def dead_letters(api: Api, count: int, **metadata: str) -> list[dict[str, Any]]:
    tenant = "t" + "-".join(f"{k}-{v}" for k, v in metadata.items())
    key = await api.key(tenant)
    jobs = []
    for _ in range(count):
        payload = {
            "endpoint": "/v1/chat/completions",
            "max_attempts": 1,
            "metadata": metadata,
            "body": {
                "model": "sim-echo",
                "messages": [{"role": "user", "content": "x"}],
                "sim": {"fail_with": "server_error"},
            },
        }
        answer = await api.http.post(
            "/v1/jobs", json=payload, headers={"Authorization": f"Bearer {key}"}
        )
        jobs.append(answer.json())
    await api.runtime.worker().run_once()
    return jobs


async def test_live_fragments_and_bulk_need_a_session(api: Api) -> None:
    for path in (
        "/dashboard/live/overview",
        "/dashboard/live/jobs",
        "/dashboard/live/jobs/job_1",
        "/dashboard/bulk",
    ):
        response = await api.http.get(path)
        assert response.status_code == 303 and response.headers["location"] == "/dashboard/login"
    refused = await api.http.post("/dashboard/bulk", data={"action": "redrive"})
    assert refused.status_code == 401


async def test_the_script_is_served_by_jobgate_and_pages_inline_none(api: Api) -> None:
    await signed_in(api)
    script = await api.http.get("/dashboard/static/console.js")
    assert script.status_code == 200 and script.headers["content-type"].startswith(
        "text/javascript"
    )
    assert "data-live" in script.text
    page = await api.http.get("/dashboard")
    csp = page.headers["content-security-policy"]
    assert (
        "script-src 'self'" in csp
        and "unsafe-inline" not in csp.split("script-src")[1].split(";")[0]
    )
    assert '<script src="/dashboard/static/console.js" defer></script>' in page.text
    assert page.text.count("<script") == 1 and "http://" not in page.text.split("<main>")[0]
    live = await api.http.get("/dashboard/live/overview")
    assert live.status_code == 200 and 'id="total-queued"' in live.text
    assert "<html" not in live.text and 'id="chart-depth"' in live.text


async def test_bulk_counts_first_and_applies_only_on_a_same_origin_post(api: Api) -> None:
    await signed_in(api)
    outage = await dead_letters(api, 3, incident="i-9")
    query = {"action": "redrive", "q": "incident=i-9", "dead": "1"}
    confirm = await api.http.get("/dashboard/bulk", params=query)
    assert confirm.status_code == 200 and '<strong id="bulk-count">3</strong>' in confirm.text
    query["counted_ms"] = counted_ms(confirm.text)
    storage = api.runtime.storage
    for job in outage:
        found = await storage.job_get(job_id=job["id"])
        assert found is not None and found.state is JobState.FAILED

    cross = await api.http.post(
        "/dashboard/bulk", data=query, headers={"Origin": "http://evil.example"}
    )
    assert cross.status_code == 401
    for job in outage:
        found = await storage.job_get(job_id=job["id"])
        assert found is not None and found.state is JobState.FAILED

    done = await api.http.post("/dashboard/bulk", data=query, headers={"Origin": api.url})
    assert done.status_code == 200 and "<strong>3</strong> jobs changed" in done.text
    for job in outage:
        found = await storage.job_get(job_id=job["id"])
        assert found is not None and found.state is JobState.QUEUED


def counted_ms(page: str) -> str:
    found = re.search(r'name="counted_ms" value="(\d+)"', page)
    assert found is not None
    return found.group(1)


async def test_jobs_submitted_after_the_count_are_left_alone(api: Api, clock: FakeClock) -> None:
    await signed_in(api)
    key = await api.key("acme")
    headers = {"Authorization": f"Bearer {key}"}
    payload = {
        "endpoint": "/v1/chat/completions",
        "metadata": {"wave": "1"},
        "body": {"model": "sim-echo", "messages": [{"role": "user", "content": "x"}]},
    }
    seen = [(await api.http.post("/v1/jobs", json=payload, headers=headers)).json() for _ in "ab"]
    query = {"action": "cancel", "q": "wave=1"}
    confirm = await api.http.get("/dashboard/bulk", params=query)
    assert '<strong id="bulk-count">2</strong>' in confirm.text
    clock.advance(1)
    late = (await api.http.post("/v1/jobs", json=payload, headers=headers)).json()

    unconfirmed = await api.http.post("/dashboard/bulk", data=query, headers={"Origin": api.url})
    assert unconfirmed.status_code == 400  # a POST without the count it confirms
    done = await api.http.post(
        "/dashboard/bulk",
        data={**query, "counted_ms": counted_ms(confirm.text)},
        headers={"Origin": api.url},
    )
    assert "<strong>2</strong> jobs changed" in done.text
    storage = api.runtime.storage
    for job in seen:
        found = await storage.job_get(job_id=job["id"])
        assert found is not None and found.state is JobState.CANCELLED
    untouched = await storage.job_get(job_id=late["id"])
    assert untouched is not None and untouched.state is JobState.QUEUED


async def test_bad_console_input_is_a_400(api: Api) -> None:
    await signed_in(api)
    for path, params in [
        ("/dashboard/jobs", {"status": "nope"}),
        ("/dashboard/jobs", {"q": "x" * 201}),
        ("/dashboard/jobs", {"q": "=v"}),
        ("/dashboard/live/jobs", {"tenant": "a\x00"}),
        ("/dashboard/jobs", {"after": "job_unknown"}),
        ("/dashboard/bulk", {"action": "explode"}),
        ("/dashboard/bulk", {"action": "cancel", "q": "job_1"}),  # an id, not a filter
        ("/dashboard", {"tenant": "t" * 201}),
    ]:
        response = await api.http.get(path, params=params)
        assert 400 <= response.status_code < 500, (path, params, response.status_code)
    # Past the year 9999 (the last second a time holds), in every width the form takes.
    past_9999 = ["253402300800000", "999999999999999", "253402300799999"]
    for counted in ("", "-1", "1e9", "9" * 16, *past_9999):
        response = await api.http.post(
            "/dashboard/bulk",
            data={"action": "cancel", "counted_ms": counted},
            headers={"Origin": api.url},
        )
        assert response.status_code == 400, counted
    big = await api.http.post(
        "/dashboard/bulk",
        content=b"action=cancel&q=" + b"a" * routes.MAX_FORM_BYTES,
        headers={"Origin": api.url, "Content-Type": "application/x-www-form-urlencoded"},
    )
    assert big.status_code == 400


async def test_search_finds_by_provider_job_id_and_unknown_tenants_match_nothing(
    api: Api,
) -> None:
    await signed_in(api)
    [job] = await dead_letters(api, 1, run="1")
    by_id = await api.http.get("/dashboard/live/jobs", params={"q": job["id"]})
    assert f'data-job="{job["id"]}"' in by_id.text
    nobody = await api.http.get("/dashboard/live/jobs", params={"tenant": "nobody"})
    assert "No jobs match" in nobody.text
    confirm = await api.http.get("/dashboard/bulk", params={"action": "delete", "tenant": "nobody"})
    assert '<strong id="bulk-count">0</strong>' in confirm.text and " disabled>" in confirm.text


async def test_the_search_box_finds_by_model_provider_and_metadata(api: Api) -> None:
    await signed_in(api)
    key = await api.key("acme")
    ids = []
    for provider, user in (("sim", "a"), ("scripted", "a"), ("scripted", "b")):
        payload = {
            "endpoint": "/v1/chat/completions",
            "provider": provider,
            "metadata": {"user": user},
            "body": {"model": "sim-echo", "messages": [{"role": "user", "content": "x"}]},
        }
        answer = await api.http.post(
            "/v1/jobs", json=payload, headers={"Authorization": f"Bearer {key}"}
        )
        ids.append(answer.json()["id"])
    for q, shown in [
        ("provider=scripted user=a", [ids[1]]),
        ("provider=scripted", [ids[1], ids[2]]),
        ("model=sim-echo, metadata[user]=a", [ids[0], ids[1]]),
        ("model=other", []),
    ]:
        page = await api.http.get("/dashboard/live/jobs", params={"q": q})
        assert page.status_code == 200, q
        assert sorted(re.findall(r'data-job="(job_[^"]+)"', page.text)) == sorted(shown), q
    clash = await api.http.get("/dashboard/jobs", params={"q": "model=a", "model": "b"})
    assert clash.status_code == 400


NASTY = ["'", '"', "%", "\\", "a=b=c", "=", "k=", "ünï=cødé", "$.x=1", "a.b=1", "*", "<script>"]


async def test_odd_input_is_never_a_5xx(api: Api) -> None:
    await signed_in(api)
    for value in NASTY:
        for field in ("q", "tenant", "model", "dead"):  # the page renders the same fragment
            response = await api.http.get("/dashboard/live/jobs", params={field: value})
            assert response.status_code < 500, (field, value)
            assert "<script>" not in response.text
        confirm = await api.http.get("/dashboard/bulk", params={"action": "cancel", "q": value})
        assert confirm.status_code < 500, value
        overview = await api.http.get("/dashboard/live/overview", params={"provider": value})
        assert overview.status_code == 200, value


async def test_the_dead_letter_page_offers_a_bulk_redrive(api: Api) -> None:
    await signed_in(api)
    await dead_letters(api, 2, incident="i-2")
    page = await api.http.get("/dashboard/dlq")
    assert 'href="/dashboard/bulk?action=redrive&amp;dead=1"' in page.text
    confirm = await api.http.get("/dashboard/bulk", params={"action": "redrive", "dead": "1"})
    assert '<strong id="bulk-count">2</strong>' in confirm.text


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # SQLite runs on the fake clock
async def test_the_time_range_counts_back_from_now(
    backend: str, api: Api, clock: FakeClock
) -> None:
    await signed_in(api)
    [old] = await dead_letters(api, 1, age="old")
    clock.advance(20 * 60)
    [new] = await dead_letters(api, 1, age="new")
    recent = await api.http.get("/dashboard/live/jobs", params={"since": "15m"})
    assert f'data-job="{new["id"]}"' in recent.text and old["id"] not in recent.text
    confirm = await api.http.get("/dashboard/bulk", params={"action": "redrive", "since": "1h"})
    assert '<strong id="bulk-count">2</strong>' in confirm.text
    confirm = await api.http.get("/dashboard/bulk", params={"action": "redrive", "since": "15m"})
    assert '<strong id="bulk-count">1</strong>' in confirm.text


async def test_the_overview_shows_a_deep_queue_as_a_floor(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Queued jobs are counted over at most ranges.QUEUE_COUNTED of each tenant's line: a
    longer line reads "N+" in the totals, the tenants' table, the breakdown and the reasons,
    with a note that the depth chart is a floor; a line within the bound reads its count."""
    await signed_in(api)
    monkeypatch.setattr(ranges, "QUEUE_COUNTED", 2)
    for tenant, count in (("deep", 3), ("short", 1)):
        key = await api.key(tenant)
        for _ in range(count):
            payload = {
                "endpoint": "/v1/chat/completions",
                "body": {"model": "sim-echo", "messages": [{"role": "user", "content": "x"}]},
            }
            answer = await api.http.post(
                "/v1/jobs", json=payload, headers={"Authorization": f"Bearer {key}"}
            )
            assert answer.status_code == 202
    live = (await api.http.get("/dashboard/live/overview")).text
    assert '<div class="value" id="total-queued">3+</div>' in live
    deep = live.split('data-tenant="deep"')[1].split("</tr>")[0]
    short = live.split('data-tenant="short"')[1].split("</tr>")[0]
    assert '<td class="num queued">2+</td>' in deep
    assert '<td class="num queued">1</td>' in short
    assert 'data-series="deep/sim">' in live
    assert '<td class="num">2+</td>' in live.split('data-series="deep/sim">')[1].split("</tr>")[0]
    reasons = live.split('id="waiting-reasons"')[1].split("</table>")[0]
    assert re.search(r'<td class="num">\d+\+</td>', reasons), reasons
    assert 'id="depth-floor"' in live

    monkeypatch.setattr(ranges, "QUEUE_COUNTED", 10)  # every line within the walk: exact
    live = (await api.http.get("/dashboard/live/overview")).text
    assert '<div class="value" id="total-queued">4</div>' in live and "+</td>" not in live
    assert 'id="depth-floor"' not in live
