"""The dashboard in headless Chromium (Debian's package, driven by Playwright): an operator
signs in, reads the overview, filters jobs, opens a timeline, redrives a dead letter and signs
out for good (the cookie is gone, and put back it is refused).
Screenshots are compared by content: the same state renders the same pixels, a change does not.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.api_server import Api

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
HAVE_CHROMIUM = os.path.exists(CHROMIUM)


@pytest.fixture
async def page() -> AsyncIterator[object]:
    if not HAVE_CHROMIUM:
        if os.environ.get("JOBGATE_TEST_REQUIRE_BROWSER") == "1":
            pytest.fail("Chromium is required (apt-get install chromium)")
        pytest.skip("Chromium is not installed (apt-get install chromium)")
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        context = await browser.new_context(viewport={"width": 1200, "height": 800})
        yield await context.new_page()
        await browser.close()


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_operator_flows_in_chromium(
    backend: str, api: Api, page: object, tmp_path: Path
) -> None:
    from playwright.async_api import Page, expect

    assert isinstance(page, Page)
    operator_key = await api.runtime.operators.create("ada")
    key = await api.key("acme")
    await api.key("beta")
    headers = {"Authorization": f"Bearer {key}"}
    failing = {
        "endpoint": "/v1/chat/completions",
        "max_attempts": 1,
        "body": {
            "model": "sim-echo",
            "messages": [{"role": "user", "content": "x"}],
            "sim": {"fail_with": "server_error"},
        },
    }
    dead = (await api.http.post("/v1/jobs", json=failing, headers=headers)).json()
    await api.runtime.worker().run_once()
    for i in range(3):
        await api.http.post(
            "/v1/jobs",
            headers=headers,
            json={
                "endpoint": "/v1/chat/completions",
                "body": {"model": "sim-echo", "messages": [{"role": "user", "content": str(i)}]},
            },
        )

    await page.goto(f"{api.url}/dashboard")
    await expect(page).to_have_url(f"{api.url}/dashboard/login")
    await page.fill("input[name=key]", "jgo_not_a_key")
    await page.click("button[type=submit]")
    await expect(page.locator("#login-error")).to_be_visible()
    await page.fill("input[name=key]", operator_key)
    await page.click("button[type=submit]")
    await expect(page).to_have_url(f"{api.url}/dashboard")
    await expect(page.locator("#storage-status")).to_have_text("sqlite ready")
    await expect(page.locator("#total-queued")).to_have_text("3")
    await expect(page.locator("#total-dead")).to_have_text("1")
    acme = page.locator('tr[data-tenant="acme"]')
    await expect(acme.locator(".queued")).to_have_text("3")
    await expect(page.locator('tr[data-tenant="beta"] .queued')).to_have_text("0")

    # Screenshots by content: a re-render of the same state is identical (the clock shown in
    # the footer aside); the page after a redrive is not.
    await page.add_style_tag(content="p.muted { visibility: hidden }")
    first = await page.locator("main").screenshot(path=str(tmp_path / "overview-1.png"))
    await page.reload()
    await page.add_style_tag(content="p.muted { visibility: hidden }")
    await expect(page.locator("#total-queued")).to_have_text("3")
    again = await page.locator("main").screenshot(path=str(tmp_path / "overview-2.png"))
    assert first[:8] == b"\x89PNG\r\n\x1a\n" and len(first) > 2000
    assert first == again

    await page.click("nav >> text=Jobs")
    await page.select_option("select[name=tenant]", "acme")
    await page.select_option("select[name=status]", "failed")
    await page.click("#filters button")
    rows = page.locator("#jobs tbody tr")
    await expect(rows).to_have_count(1)
    await rows.first.locator("a").click()
    await expect(page.locator("#job-status")).to_have_text("failed")
    timeline = page.locator("#timeline tbody tr")
    await expect(timeline).to_have_count(3)
    await expect(timeline.nth(2)).to_contain_text("running → failed")

    await page.click("nav >> text=Dead letters")
    await expect(page.locator(f'tr[data-job="{dead["id"]}"]')).to_be_visible()
    await page.click(f'tr[data-job="{dead["id"]}"] button')
    await expect(page.locator("#job-status")).to_have_text("queued")
    await page.click("nav >> text=Overview")
    await expect(page).to_have_url(f"{api.url}/dashboard")
    await page.wait_for_load_state()
    await page.add_style_tag(content="p.muted { visibility: hidden }")
    await expect(page.locator("#total-dead")).to_have_text("0")
    after = await page.locator("main").screenshot(path=str(tmp_path / "overview-3.png"))
    assert after != first

    await page.click("nav >> text=Webhooks")
    await expect(page.locator("#endpoints")).to_contain_text("No endpoints registered")
    cookies = await page.context.cookies()
    session = next(c for c in cookies if c["name"] == "jobgate_session")
    assert session["value"].startswith("jgs_") and session["value"] != operator_key
    assert session["path"] == "/dashboard" and session["httpOnly"]
    await page.click("text=Sign out")
    await expect(page).to_have_url(f"{api.url}/dashboard/login")
    # Really signed out: the browser dropped the cookie, and every page sends it to sign in.
    assert not [c for c in await page.context.cookies() if c["name"] == "jobgate_session"]
    await page.goto(f"{api.url}/dashboard/jobs")
    await expect(page).to_have_url(f"{api.url}/dashboard/login")
    # The old cookie, put back by hand, is refused: its session ended on the server.
    await page.context.add_cookies(
        [
            {
                "name": session["name"],
                "value": session["value"],
                "domain": session["domain"],
                "path": session["path"],
                "expires": session["expires"],
                "httpOnly": session["httpOnly"],
                "secure": session["secure"],
                "sameSite": session["sameSite"],
            }
        ]
    )
    await page.goto(f"{api.url}/dashboard")
    await expect(page).to_have_url(f"{api.url}/dashboard/login")
    await asyncio.sleep(0)
