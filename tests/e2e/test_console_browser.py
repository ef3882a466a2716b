"""The operator console in headless Chromium (Debian's package, through Playwright): counts
and the jobs table refresh while jobs drain without a reload, search by metadata and id, a
job page with its attempts and a redacted request, a bulk redrive behind a confirmation that
shows the count, and no horizontal overflow at 390 px. With JOBGATE_UPDATE_SCREENSHOTS=1
the screenshots land in docs/img/ (README's "Operating it" shows them).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from jobgate.domain.states import JobState
from jobgate.testing import FakeClock
from tests.api_server import Api
from tests.e2e.test_dashboard_browser import CHROMIUM, HAVE_CHROMIUM

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]
DOCS_IMAGES = Path(__file__).resolve().parents[2] / "docs" / "img"
SECRET = "the quarterly numbers nobody may read"


@pytest.fixture
def images(tmp_path: Path) -> Path:
    """Where screenshots go: docs/img/ with JOBGATE_UPDATE_SCREENSHOTS=1 (README shows them),
    else the test's own folder, so that a test run leaves the committed images alone."""
    import os

    if os.environ.get("JOBGATE_UPDATE_SCREENSHOTS") == "1":
        DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
        return DOCS_IMAGES
    return tmp_path


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    import os

    if not HAVE_CHROMIUM:
        if os.environ.get("JOBGATE_TEST_REQUIRE_BROWSER") == "1":
            pytest.fail("Chromium is required (apt-get install chromium)")
        pytest.skip("Chromium is not installed (apt-get install chromium)")
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"],
        )
        yield launched
        await launched.close()


async def signed_in_page(api: Api, browser: Any, *, width: int = 1200, height: int = 900) -> Any:
    key = await api.runtime.operators.create("ada")
    context = await browser.new_context(viewport={"width": width, "height": height})
    page = await context.new_page()
    await page.goto(f"{api.url}/dashboard/login")
    await page.fill("input[name=key]", key)
    await page.click("button[type=submit]")
    await page.wait_for_url(f"{api.url}/dashboard")
    return page


def chat(content: str, **extra: Any) -> dict[str, Any]:
    sim = extra.pop("sim", None)
    body: dict[str, Any] = {"model": "sim-echo", "messages": [{"role": "user", "content": content}]}
    if sim:
        body["sim"] = sim
    return {"endpoint": "/v1/chat/completions", "body": body, **extra}


async def submit(api: Api, key: str, payload: dict[str, Any]) -> dict[str, Any]:
    answer = await api.http.post(
        "/v1/jobs", json=payload, headers={"Authorization": f"Bearer {key}"}
    )
    assert answer.status_code in (200, 201, 202), answer.text
    return dict(answer.json())


async def dead_letter(api: Api, key: str, **extra: Any) -> dict[str, Any]:
    job = await submit(
        api, key, chat("x", max_attempts=1, sim={"fail_with": "server_error"}, **extra)
    )
    await api.runtime.worker().run_once()
    return job


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_counts_and_jobs_refresh_while_jobs_drain(
    backend: str, api: Api, browser: Any, clock: FakeClock, images: Path
) -> None:
    from playwright.async_api import expect

    key = await api.key("acme")
    beta = await api.key("beta")
    await dead_letter(api, key)
    # Some history for the charts: batches that wait in the queue a while, minutes apart.
    worker = api.runtime.worker()
    for batch in range(6):
        for i in range(2 + batch % 3):
            await submit(api, beta if i % 2 else key, chat(f"{batch}.{i}"))
        clock.advance(10 + 15 * batch)
        await worker.run_once()
        clock.advance(300)
    for i in range(5):
        await submit(api, key, chat(str(i), metadata={"customer": f"c-{i}"}))
    page = await signed_in_page(api, browser)
    await expect(page.locator("#total-queued")).to_have_text("5")
    await expect(page.locator("#chart-throughput")).to_be_visible()
    await page.evaluate("window.notReloaded = true")

    await api.runtime.worker().run_once()  # the queue drains while the page stays open
    await expect(page.locator("#total-queued")).to_have_text("0", timeout=10_000)
    await expect(page.locator('tr[data-tenant="acme"] .queued')).to_have_text("0")
    await expect(page.locator("#live-status")).to_contain_text("live")
    assert await page.evaluate("window.notReloaded") is True
    # The last hour's breakdown counts what just ran: five done, one error.
    series = page.locator('tr[data-series="acme/sim"]')
    await expect(series.locator("td").nth(3)).to_have_text("15")
    await expect(series.locator("td").nth(4)).to_contain_text("1")
    shot = await page.screenshot(path=str(images / "console-overview.png"), full_page=True)
    assert shot.startswith(b"\x89PNG")

    # Paused, nothing refreshes; picked again, it does (the choice is kept in the browser).
    await page.select_option("#live-every", "0")
    await expect(page.locator("#live-status")).to_have_text("paused")
    await submit(api, key, chat("while paused"))
    await page.wait_for_timeout(2500)
    await expect(page.locator("#total-queued")).to_have_text("0")
    await page.select_option("#live-every", "1")
    await expect(page.locator("#total-queued")).to_have_text("1")
    await api.runtime.worker().run_once()

    # The jobs table refreshes too: a job submitted now appears without a reload.
    await page.click("nav >> text=Jobs")
    await page.wait_for_url(f"{api.url}/dashboard/jobs")
    await page.evaluate("window.notReloaded = true")
    late = await submit(api, key, chat("late"))
    await expect(page.locator(f'#jobs tr[data-job="{late["id"]}"]')).to_be_visible(timeout=10_000)
    assert await page.evaluate("window.notReloaded") is True

    # A running or queued job's page follows it to the end.
    await page.click(f'#jobs tr[data-job="{late["id"]}"] a')
    await expect(page.locator("#job-status")).to_have_text("queued")
    await page.evaluate("window.notReloaded = true")
    await api.runtime.worker().run_once()
    await expect(page.locator("#job-status")).to_have_text("succeeded", timeout=10_000)
    await expect(page.locator("#attempts tbody tr")).to_have_count(1)
    assert await page.evaluate("window.notReloaded") is True


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_search_and_the_job_page_with_its_attempts(
    backend: str, api: Api, browser: Any, clock: FakeClock, images: Path
) -> None:
    from playwright.async_api import expect

    key = await api.key("acme")
    flaky = await submit(
        api,
        key,
        chat(
            SECRET,
            max_attempts=2,
            metadata={"customer": "c-42", "run": "7"},
            sim={"fail_with": "server_error"},
        ),
    )
    await submit(api, key, chat("other", metadata={"customer": "c-43"}))
    worker = api.runtime.worker()
    await worker.run_once()  # the flaky job's first attempt fails and is retried
    clock.advance(5)
    await worker.run_once()  # its second and last attempt fails too
    page = await signed_in_page(api, browser)

    await page.goto(f"{api.url}/dashboard/jobs")
    await page.fill("input[name=q]", "customer=c-42")
    await page.click("#filters button")
    rows = page.locator("#jobs tbody tr")
    await expect(rows).to_have_count(1)
    await expect(rows.first).to_have_attribute("data-job", flaky["id"])
    await page.fill("input[name=q]", flaky["id"])  # by id
    await page.click("#filters button")
    await expect(rows).to_have_count(1)
    await page.fill("input[name=q]", "customer=nobody")
    await page.click("#filters button")
    await expect(rows.first).to_contain_text("No jobs match")

    await page.goto(f"{api.url}/dashboard/jobs?q=customer%3Dc-42")
    await rows.first.locator("a").click()
    await expect(page.locator("#job-status")).to_have_text("failed")
    attempts = page.locator("#attempts tbody tr")
    await expect(attempts).to_have_count(2)
    await expect(attempts.nth(0)).to_contain_text("sim · sim-echo")
    await expect(attempts.nth(0).locator(".error")).not_to_be_empty()
    await expect(attempts.nth(0)).to_contain_text("queued")  # retried
    await expect(attempts.nth(1)).to_contain_text("failed")
    stored = await api.runtime.storage.job_get(job_id=flaky["id"])
    assert stored is not None and stored.error is not None
    message = stored.error["message"]
    await expect(attempts.nth(1).locator(".error")).to_contain_text(message)
    request = page.locator("#job-request")
    await expect(request).to_contain_text('"role": "user"')
    await expect(request).to_contain_text(f"[{len(SECRET)} chars]")
    assert SECRET not in await page.content()  # never the prompt, by default
    await expect(page.locator("#job-metadata")).to_contain_text("customer=c-42")
    await page.screenshot(path=str(images / "console-job.png"), full_page=True)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_bulk_redrive_by_filter_behind_a_confirmation(
    backend: str, api: Api, browser: Any
) -> None:
    from playwright.async_api import expect

    key = await api.key("acme")
    outage = [await dead_letter(api, key, metadata={"incident": "i-9"}) for _ in range(3)]
    other = await dead_letter(api, key, metadata={"incident": "i-1"})
    page = await signed_in_page(api, browser)

    await page.goto(f"{api.url}/dashboard/jobs")
    await page.fill("input[name=q]", "incident=i-9")
    await page.select_option("select[name=dead]", "1")
    await page.click("#filters button")
    await expect(page.locator("#jobs tbody tr")).to_have_count(3)
    await page.click("#bulk-redrive")
    await expect(page.locator("#bulk-count")).to_have_text("3")  # the count, before anything
    storage = api.runtime.storage
    for job in outage:  # nothing changed yet
        assert (await storage.job_get(job_id=job["id"])).state is JobState.FAILED  # type: ignore[union-attr]
    await page.click("#confirm")
    await expect(page.locator("#bulk-result")).to_contain_text("3 jobs changed")
    for job in outage:
        redriven = await storage.job_get(job_id=job["id"])
        assert redriven is not None and redriven.state is JobState.QUEUED
        last = (await storage.job_events(job_id=job["id"]))[-1]
        assert (last.actor, last.reason) == ("operator:ada", "bulk_redrive: console")
    untouched = await storage.job_get(job_id=other["id"])
    assert untouched is not None and untouched.state is JobState.FAILED


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_no_horizontal_overflow_at_390_px(
    backend: str, api: Api, browser: Any, images: Path
) -> None:
    from playwright.async_api import expect

    key = await api.key("a-tenant-with-a-rather-long-name")
    job = await dead_letter(
        api, key, metadata={"customer": "a-customer-with-a-very-long-identifier-0123456789"}
    )
    for i in range(4):
        await submit(api, key, chat(str(i)))
    page = await signed_in_page(api, browser, width=390, height=844)
    for path in (
        "/dashboard",
        "/dashboard/jobs",
        f"/dashboard/jobs/{job['id']}",
        "/dashboard/dlq",
        "/dashboard/batches",
    ):
        await page.goto(f"{api.url}{path}")
        await page.wait_for_load_state()
        overflow = await page.evaluate(
            "document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow <= 0, f"{path} overflows by {overflow} px"
        if path == "/dashboard/jobs":
            table = await page.evaluate(
                "document.querySelector('#jobs').getBoundingClientRect().right"
            )
            assert table <= 390
            await expect(page.locator("#jobs tbody tr")).to_have_count(5)
            await page.screenshot(path=str(images / "console-mobile.png"), full_page=True)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_batches_with_progress_counts_and_failed_lines(
    backend: str, api: Api, browser: Any, images: Path
) -> None:
    """The batches page lists a batch with its status and request counts as a progress bar
    that follows the batch without a reload; its failed count links to the failed lines' jobs."""
    from playwright.async_api import expect

    key = await api.key("acme")
    lines = [chat(f"line {i}")["body"] for i in range(6)]
    lines[1]["sim"] = {"fail_with": "invalid_request"}
    lines[4]["sim"] = {"fail_with": "invalid_request"}
    content = b"".join(
        orjson.dumps({"custom_id": f"c{i}", "method": "POST", "url": "/v1/chat/completions",
                      "body": body}) + b"\n"
        for i, body in enumerate(lines)
    )  # fmt: skip
    auth = {"Authorization": f"Bearer {key}"}
    uploaded = await api.http.post(
        "/v1/files", headers=auth, data={"purpose": "batch"}, files={"file": ("in.jsonl", content)}
    )
    assert uploaded.status_code == 200, uploaded.text
    created = await api.http.post(
        "/v1/batches",
        headers=auth,
        json={"input_file_id": uploaded.json()["id"], "endpoint": "/v1/chat/completions",
              "completion_window": "24h"},
    )  # fmt: skip
    assert created.status_code == 200, created.text
    batch_id = created.json()["id"]
    runner = api.runtime.batch_runner()
    await runner.batches_once()  # validated: its lines are checked
    await runner.batches_once()  # expanded: six queued jobs

    page = await signed_in_page(api, browser)
    await page.click("nav >> text=Batches")
    await page.wait_for_url(f"{api.url}/dashboard/batches")
    row = page.locator(f'#batches tr[data-batch="{batch_id}"]')
    await expect(row.locator(".batch-status")).to_have_text("in_progress")
    await expect(row.locator(".total-count")).to_have_text("6")
    await expect(row.locator(".done-count")).to_have_text("0")
    await page.evaluate("window.notReloaded = true")

    await api.runtime.worker().run_once()  # the lines run while the page stays open
    await runner.batches_once()  # finalizing
    await runner.batches_once()  # completed
    await expect(row.locator(".batch-status")).to_have_text("completed", timeout=10_000)
    await expect(row.locator(".done-count")).to_have_text("4")
    await expect(row.locator(".failed-count")).to_have_text("2")
    bar = row.locator('[role="progressbar"]')
    assert await bar.get_attribute("aria-valuenow") == "6"
    done_width = await row.locator(".progress .done").evaluate("e => e.style.width")
    assert done_width == "66.7%"
    assert await page.evaluate("window.notReloaded") is True
    await page.screenshot(path=str(images / "console-batches.png"), full_page=True)

    await row.locator("a.failed-lines").click()
    await page.wait_for_url(f"{api.url}/dashboard/jobs?*")
    await expect(page.locator("#jobs tbody tr")).to_have_count(2)
    tenant = await api.runtime.tenants.authenticate(key)
    failed = await api.runtime.storage.job_list(tenant_id=tenant.id, limit=10)
    failed_ids = {job.id for job in failed if job.metadata.get("custom_id") in ("c1", "c4")}
    for job_id in failed_ids:
        await expect(page.locator(f'#jobs tr[data-job="{job_id}"]')).to_be_visible()
