"""/docs (Swagger UI) and /redoc in headless Chromium with every request off 127.0.0.1
refused: the API docs render from jobgate's own assets, with each operation and the bearer
Authorize button."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator

import pytest

from tests.api_server import Api

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
HAVE_CHROMIUM = os.path.exists(CHROMIUM)


@pytest.fixture
async def offline_page(api: Api) -> AsyncIterator[tuple[object, list[str]]]:
    """A page whose requests to anything but the test server are aborted (and recorded)."""
    if not HAVE_CHROMIUM:
        if os.environ.get("JOBGATE_TEST_REQUIRE_BROWSER") == "1":
            pytest.fail("Chromium is required (apt-get install chromium)")
        pytest.skip("Chromium is not installed (apt-get install chromium)")
    from playwright.async_api import Route, async_playwright

    refused: list[str] = []

    async def only_the_server(route: Route) -> None:
        if route.request.url.startswith(api.url + "/"):
            await route.continue_()
        else:
            refused.append(route.request.url)
            await route.abort("internetdisconnected")

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update"],
        )  # fmt: skip
        context = await browser.new_context(viewport={"width": 1200, "height": 900})
        await context.route("**/*", only_the_server)
        yield await context.new_page(), refused
        await browser.close()


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_swagger_ui_and_redoc_render_offline(
    backend: str, api: Api, offline_page: tuple[object, list[str]]
) -> None:
    from playwright.async_api import Page, expect

    page, refused = offline_page
    assert isinstance(page, Page)
    spec = (await api.http.get("/openapi.json")).json()
    operations = sum(
        1 for item in spec["paths"].values() for method in item if method in ("get", "post",
                                                                              "patch", "delete")
    )  # fmt: skip

    await page.goto(f"{api.url}/docs")
    blocks = page.locator(".opblock")
    await expect(blocks.first).to_be_visible(timeout=30_000)
    await expect(blocks).to_have_count(operations)
    await expect(
        page.locator(".opblock-summary-description", has_text="Submit a job")
    ).to_be_visible()
    await expect(page.locator("button.authorize")).to_be_visible()

    await page.goto(f"{api.url}/redoc")
    await expect(page.get_by_text("Submit a job").first).to_be_attached(timeout=30_000)
    await expect(page.locator("[data-section-id^='operation/']").first).to_be_attached()
    assert refused == [], refused
