"""The console tells the truth at a glance, in headless Chromium: no word is broken across
lines (at desktop and phone width), a job can be cancelled from its page, an empty console
offers a test job that can be followed to the end, and a chart shows a minute's values on
hover."""

from __future__ import annotations

from typing import Any

import pytest

from jobgate.domain.states import JobState
from tests.api_server import Api
from tests.e2e.test_console_browser import browser, chat, dead_letter, signed_in_page, submit

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]
__all__ = ["browser"]  # the fixture, imported for the tests below

# Every word of running text broken across two lines, as [word, element]: a word's range has
# one client rect per line it is laid out on. Identifiers, URLs and code may wrap anywhere.
BROKEN_WORDS = r"""
() => {
  const broken = [];
  const walker = document.createTreeWalker(document.querySelector("main"), NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const parent = node.parentElement;
    if (!parent || parent.closest(".id, code, pre, .url, svg, select, option")) continue;
    if (!parent.getClientRects().length) continue;  // not displayed
    for (const match of node.data.matchAll(/[A-Za-z]{2,}/g)) {
      const range = document.createRange();
      range.setStart(node, match.index);
      range.setEnd(node, match.index + match[0].length);
      const lines = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
      if (lines.size > 1) broken.push([match[0], parent.outerHTML.slice(0, 120)]);
    }
  }
  return broken;
}
"""


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
@pytest.mark.parametrize("width", [1200, 390])
async def test_no_word_is_broken_across_lines(
    backend: str, api: Api, browser: Any, width: int
) -> None:
    key = await api.key("a-tenant-with-a-rather-long-name")
    job = await dead_letter(
        api, key, metadata={"customer": "a-customer-with-a-very-long-identifier-0123456789"}
    )
    for i in range(3):
        await submit(api, key, chat(str(i)))
    await api.runtime.worker().run_once()
    page = await signed_in_page(api, browser, width=width, height=900)
    for path in (
        "/dashboard",
        "/dashboard/jobs",
        f"/dashboard/jobs/{job['id']}",
        "/dashboard/dlq",
        "/dashboard/webhooks",
        "/dashboard/batches",
    ):
        await page.goto(f"{api.url}{path}")
        await page.wait_for_load_state()
        broken = await page.evaluate(BROKEN_WORDS)
        assert broken == [], f"{path} at {width} px breaks words: {broken}"
        overflow = await page.evaluate(
            "document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow <= 0, f"{path} at {width} px overflows by {overflow} px"


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_an_empty_console_offers_a_test_job_to_follow_and_cancel(
    backend: str, api: Api, browser: Any
) -> None:
    from playwright.async_api import expect

    await api.key("default")
    page = await signed_in_page(api, browser)
    form = page.locator("#test-job")
    await expect(form).to_be_visible()
    await form.locator("input[name=prompt]").fill("my first job")
    await form.locator("button").click()
    await page.wait_for_url(f"{api.url}/dashboard/jobs/job_*")
    await expect(page.locator("#job-status")).to_have_text("queued")
    job_id = page.url.rsplit("/", 1)[1]
    stored = await api.runtime.storage.job_get(job_id=job_id)
    assert stored is not None and stored.model == "sim-echo"

    await page.locator("#cancel").click()  # a queued job is cancelled at once
    await page.wait_for_url(f"{api.url}/dashboard/jobs/{job_id}")
    await expect(page.locator("#job-status")).to_have_text("cancelled")
    await expect(page.locator("#cancel")).to_have_count(0)  # nothing left to cancel
    stored = await api.runtime.storage.job_get(job_id=job_id)
    assert stored is not None and stored.state is JobState.CANCELLED
    last = (await api.runtime.storage.job_events(job_id=job_id))[-1]
    assert last.actor == "operator:ada"
    await page.goto(f"{api.url}/dashboard")
    await expect(page.locator("#test-job")).to_have_count(0)  # no longer empty


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_a_chart_shows_a_minutes_values_on_hover(
    backend: str, api: Api, browser: Any
) -> None:
    from playwright.async_api import expect

    key = await api.key("acme")
    for i in range(3):
        await submit(api, key, chat(str(i)))
    await api.runtime.worker().run_once()
    page = await signed_in_page(api, browser)
    chart = page.locator("#chart-throughput")
    await expect(chart.locator("figcaption")).to_contain_text("last 60 min")
    latest = chart.locator("rect.hover").last
    await latest.hover()
    assert await latest.locator("title").text_content() == "this minute: succeeded 3, errors 0"
    shade = await latest.evaluate("e => getComputedStyle(e).fill")
    assert shade != "rgba(0, 0, 0, 0)"  # the hovered minute is marked
