"""The console says what /metrics says, and offers what an operator needs next: a failing
webhook endpoint is failing on both at the same attempt; a job can be cancelled from its page;
an empty console submits a test job; `/` leads to the console."""

from __future__ import annotations

import html
import re
from datetime import timedelta

import pytest

from jobgate.domain.states import JobState
from jobgate.http.routes import metrics
from jobgate.storage.records import DeliveryOutcome
from jobgate.testing import FakeClock
from tests.api_server import Api
from tests.http.test_dashboard import signed_in
from tests.http.test_metrics_alerts import samples
from tests.storage.webhook_helpers import make_endpoint

CHAT = "/v1/chat/completions"
BODY = {"model": "sim-echo", "messages": [{"role": "user", "content": "hi"}]}
REFUSED = DeliveryOutcome(
    state="pending", attempted=True, status_code=None, latency_ms=3, error="ConnectError",
    retry_in_s=1,
)  # fmt: skip


def text(page: str) -> str:
    """A page's text, tags and spacing aside."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


async def test_a_failing_endpoint_is_failing_on_the_console_when_metrics_say_so(
    api: Api, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = api.runtime.storage
    operator = {"Authorization": f"Bearer {await signed_in(api)}"}
    key = await api.key("acme")
    acme = await storage.tenant_get(name="acme")
    assert acme is not None
    endpoint = await make_endpoint(storage, acme, clock, url="http://127.0.0.1:9/hook")
    await api.http.post(
        "/v1/jobs",
        json={"endpoint": CHAT, "body": BODY},
        headers={"Authorization": f"Bearer {key}"},
    )
    await api.runtime.worker().run_once()
    moment = await storage.database_now()
    for attempt in range(1, 4):  # immediately, 5 s, 5 min: each refused (nothing listens)
        moment += timedelta(seconds=2)
        [delivery] = await storage.delivery_claim_due(limit=5, lease_s=30, now=moment)
        assert await storage.delivery_record(delivery=delivery, outcome=REFUSED, now=moment)
        monkeypatch.setattr(metrics._Gauges, "refreshed_at", -1e18)  # read afresh
        metric = samples(
            (await api.http.get("/metrics", headers=operator)).text,
            "jobgate_webhook_endpoints_failing",
        )
        webhooks = text((await api.http.get("/dashboard/webhooks")).text)
        overview = (await api.http.get("/dashboard/live/overview")).text
        card = re.search(r'id="failing-endpoints">(\d+)<', overview)
        assert card is not None
        failing = attempt >= 3
        assert metric == {"acme": 1 if failing else 0}
        assert int(card.group(1)) == (1 if failing else 0)
        row = webhooks.split(endpoint.id, 1)[1]
        assert row.split()[2] == ("failing" if failing else "healthy"), row
        assert "ConnectError" in row


async def test_a_job_is_cancelled_from_its_page(api: Api) -> None:
    await signed_in(api)
    key = await api.key("acme")
    job = (
        await api.http.post(
            "/v1/jobs",
            json={"endpoint": CHAT, "body": BODY},
            headers={"Authorization": f"Bearer {key}"},
        )
    ).json()
    page = (await api.http.get(f"/dashboard/jobs/{job['id']}")).text
    assert f'action="/dashboard/jobs/{job["id"]}/cancel"' in page
    elsewhere = await api.http.post(
        f"/dashboard/jobs/{job['id']}/cancel", headers={"Origin": "https://evil.example"}
    )
    assert elsewhere.status_code == 401
    done = await api.http.post(f"/dashboard/jobs/{job['id']}/cancel")
    assert done.status_code == 303 and done.headers["location"] == f"/dashboard/jobs/{job['id']}"
    stored = await api.runtime.storage.job_get(job_id=job["id"])
    assert stored is not None and stored.state is JobState.CANCELLED
    events = await api.runtime.storage.job_events(job_id=job["id"])
    assert events[-1].actor == "operator:ada"
    page = (await api.http.get(f"/dashboard/jobs/{job['id']}")).text
    assert "/cancel" not in page  # a finished job offers no cancel
    missing = await api.http.post("/dashboard/jobs/job_00000000000000000000000000/cancel")
    assert missing.status_code == 404


async def test_an_empty_console_submits_a_test_job(api: Api) -> None:
    await signed_in(api)
    await api.key("default")
    page = (await api.http.get("/dashboard")).text
    assert 'id="test-job"' in page and "<option selected>default</option>" in page
    for form, param in (
        ({"tenant": "", "prompt": "hi"}, "tenant"),
        ({"tenant": "default", "prompt": "x" * 2001}, "prompt"),
    ):
        refused = await api.http.post("/dashboard/test_job", data=form)
        assert refused.status_code == 400 and refused.json()["error"]["param"] == param
    unknown = await api.http.post("/dashboard/test_job", data={"tenant": "nobody"})
    assert unknown.status_code == 404
    sent = await api.http.post("/dashboard/test_job", data={"tenant": "default", "prompt": "hey"})
    assert sent.status_code == 303
    job_id = sent.headers["location"].rsplit("/", 1)[1]
    job = await api.runtime.storage.job_get(job_id=job_id)
    assert job is not None and job.model == "sim-echo" and job.metadata == {"submitted_by": "ada"}
    await api.runtime.worker().run_once()
    assert 'id="test-job"' not in (await api.http.get("/dashboard")).text  # no longer empty


async def test_the_root_leads_to_the_console(api: Api) -> None:
    answer = await api.http.get("/", follow_redirects=False)
    assert answer.status_code == 307 and answer.headers["location"] == "/dashboard"
    signed_out = await api.http.get("/", follow_redirects=True)
    assert str(signed_out.url).endswith("/dashboard/login")
