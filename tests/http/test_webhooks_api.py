"""The webhook API over HTTP (the ASGI app, in process), on both backends: endpoints, secrets,
test pings, recovery, a job's deliveries, and SSRF refusals as 422 problem+json."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Iterator, Sequence
from datetime import timedelta
from typing import Any

import httpx
import pytest

from jobgate.client.webhooks import verify_webhook
from jobgate.clock import SystemClock
from jobgate.config import Settings
from jobgate.http.app import create_app
from jobgate.http.context import AppContext
from jobgate.ids import RandomIds
from jobgate.process.runtime import Runtime
from jobgate.roles.dispatcher import Dispatcher
from jobgate.storage.protocol import Storage
from jobgate.testing import FakeClock
from jobgate.testing.receiver import Reply, WebhookReceiver
from tests.storage.helpers import finish_one

pytestmark = pytest.mark.asyncio

DEV = {"webhook_allow_http": True, "webhook_allow_cidrs": ("127.0.0.0/8",)}
CHAT = {
    "endpoint": "/v1/chat/completions",
    "body": {"model": "sim-echo", "messages": [{"role": "user", "content": "hi"}]},
}


class Api:
    def __init__(self, ctx: AppContext, client: httpx.AsyncClient, key: str) -> None:
        self.ctx = ctx
        self.client = client
        self.headers = {"Authorization": f"Bearer {key}"}

    async def call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return await self.client.request(method, path, headers=self.headers, **kwargs)

    def fake_dns(self, table: dict[str, Sequence[str]]) -> None:
        async def resolve(host: str, port: int) -> Sequence[str]:
            if host not in table:
                raise OSError("unknown host")
            return table[host]

        self.ctx.jobs.webhook_guard.resolver = resolve


@pytest.fixture
async def make_api(storage: Storage, clock: FakeClock) -> AsyncIterator[Any]:
    clients: list[httpx.AsyncClient] = []

    async def build(tenant: str = "acme", **settings_fields: Any) -> Api:
        settings = Settings(**settings_fields)
        runtime = Runtime(settings, storage=storage, clock=clock, ids=RandomIds(clock))
        ctx = runtime.app_context()
        tenants = runtime.tenants
        client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=create_app(ctx)), base_url="http://jobgate.test"
        )
        clients.append(client)
        existing = await storage.tenant_get(name=tenant)
        issued = await tenants.issue_key(existing) if existing else await tenants.create(tenant)
        return Api(ctx, client, issued.api_key)

    yield build
    for client in clients:
        await client.aclose()


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver() as running:
        yield running


def assert_refused(response: httpx.Response, reason: str, param: str = "url") -> None:
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["code"] == "webhook_url_refused" and problem["reason"] == reason
    assert problem["error"]["param"] == param and problem["status"] == 422


async def test_endpoint_lifecycle(make_api: Any, receiver: WebhookReceiver) -> None:
    api = await make_api(**DEV)
    created = await api.call(
        "POST",
        "/v1/webhook_endpoints",
        json={"url": receiver.url, "event_types": ["job.succeeded"], "description": "prod"},
    )
    assert created.status_code == 201, created.text
    endpoint = created.json()
    assert endpoint["object"] == "webhook_endpoint" and endpoint["id"].startswith("ep_")
    assert endpoint["secret"].startswith("whsec_")
    assert created.headers["location"] == f"/v1/webhook_endpoints/{endpoint['id']}"
    path = f"/v1/webhook_endpoints/{endpoint['id']}"

    shown = (await api.call("GET", path)).json()
    assert "secret" not in shown  # shown once
    assert shown["event_types"] == ["job.succeeded"] and shown["description"] == "prod"
    listed = (await api.call("GET", "/v1/webhook_endpoints")).json()
    assert [e["id"] for e in listed["data"]] == [endpoint["id"]] and not listed["has_more"]

    patched = await api.call("PATCH", path, json={"disabled": True, "include_result": True})
    assert patched.status_code == 200
    assert patched.json()["disabled"] and patched.json()["include_result"]
    assert patched.json()["event_types"] == ["job.succeeded"]

    other = await make_api("beta", **DEV)
    assert (await other.call("GET", path)).status_code == 404
    assert (await other.call("DELETE", path)).status_code == 404
    deleted = await api.call("DELETE", path)
    assert deleted.json() == {"id": endpoint["id"], "object": "webhook_endpoint", "deleted": True}
    assert (await api.call("GET", path)).status_code == 404


async def test_listing_pages(make_api: Any, clock: FakeClock) -> None:
    api = await make_api(**DEV)
    made = []
    for n in range(3):
        response = await api.call(
            "POST", "/v1/webhook_endpoints", json={"url": f"http://127.0.0.1:9/{n}"}
        )
        made.append(response.json()["id"])
        clock.advance(1)
    page = (await api.call("GET", "/v1/webhook_endpoints", params={"limit": 2})).json()
    assert [e["id"] for e in page["data"]] == made[:2] and page["has_more"]
    rest = (
        await api.call(
            "GET", "/v1/webhook_endpoints", params={"limit": 2, "after": page["last_id"]}
        )
    ).json()
    assert [e["id"] for e in rest["data"]] == made[2:] and not rest["has_more"]


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("https://127.0.0.1/hook", "loopback"),
        ("https://2130706433/hook", "loopback"),
        ("https://0x7f.1/hook", "loopback"),
        ("https://0177.0.0.1/hook", "loopback"),
        ("https://169.254.169.254/latest/meta-data", "link_local"),
        ("https://10.1.2.3/hook", "private"),
        ("https://100.64.0.1/hook", "cgnat"),
        ("https://0.0.0.0/hook", "unspecified"),
        ("https://[::1]/hook", "loopback"),
        ("https://[::ffff:127.0.0.1]/hook", "loopback"),
        ("https://[fd00::1]/hook", "unique_local"),
        ("https://loopback.test/hook", "loopback"),
        ("https://nowhere.test/hook", "unresolvable"),
        ("http://public.test/hook", "scheme_not_allowed"),
    ],
)
async def test_refused_urls_are_422_naming_the_reason(make_api: Any, url: str, reason: str) -> None:
    api = await make_api()
    api.fake_dns({"loopback.test": ["127.0.0.1"], "public.test": ["93.184.216.34"]})
    assert_refused(await api.call("POST", "/v1/webhook_endpoints", json={"url": url}), reason)
    submit = await api.call("POST", "/v1/jobs", json={**CHAT, "webhook": {"url": url}})
    assert_refused(submit, reason, param="webhook.url")
    assert (await api.call("GET", "/v1/jobs")).json()["data"] == []  # nothing stored


async def test_patching_the_url_is_checked_again(make_api: Any) -> None:
    api = await make_api()
    api.fake_dns({"public.test": ["93.184.216.34"], "private.test": ["192.168.0.10"]})
    created = await api.call("POST", "/v1/webhook_endpoints", json={"url": "https://public.test/"})
    assert created.status_code == 201
    path = f"/v1/webhook_endpoints/{created.json()['id']}"
    assert_refused(await api.call("PATCH", path, json={"url": "https://private.test/"}), "private")
    assert (await api.call("GET", path)).json()["url"] == "https://public.test/"


async def test_malformed_urls_and_event_types_are_400(make_api: Any) -> None:
    api = await make_api()
    bad_url = await api.call("POST", "/v1/webhook_endpoints", json={"url": "not a url"})
    assert bad_url.status_code == 400 and bad_url.json()["error"]["param"] == "url"
    no_host = await api.call("POST", "/v1/webhook_endpoints", json={"url": "https://:443/x"})
    assert no_host.status_code == 400
    bad_type = await api.call(
        "POST",
        "/v1/webhook_endpoints",
        json={"url": "https://1.1.1.1/", "event_types": ["job.exploded"]},
    )
    assert bad_type.status_code == 400 and bad_type.json()["error"]["param"] == "event_types"


async def test_progress_interval_is_kept_and_bounded(make_api: Any) -> None:
    api = await make_api(**DEV)
    created = await api.call(
        "POST",
        "/v1/webhook_endpoints",
        json={
            "url": "https://1.1.1.1/",
            "event_types": ["job.progress"],
            "progress_interval_s": 2,
        },
    )
    assert created.status_code == 201, created.text
    assert created.json()["progress_interval_s"] == 2
    path = f"/v1/webhook_endpoints/{created.json()['id']}"
    for bad in (0.5, 3601, "fast"):
        refused = await api.call("PATCH", path, json={"progress_interval_s": bad})
        assert refused.status_code == 400, bad
        assert refused.headers["content-type"].startswith("application/problem+json")
        assert refused.json()["error"]["param"] == "progress_interval_s"
    patched = await api.call("PATCH", path, json={"progress_interval_s": 30})
    assert patched.json()["progress_interval_s"] == 30
    plain = await api.call("POST", "/v1/webhook_endpoints", json={"url": "https://1.1.1.1/"})
    assert plain.json()["progress_interval_s"] == 5 and plain.json()["event_types"] == []
    schemas = (await api.call("GET", "/openapi.json")).json()["components"]["schemas"]
    for name in ("CreateEndpointRequest", "UpdateEndpointRequest", "EndpointOut"):
        assert "progress_interval_s" in schemas[name]["properties"], name
    created_schema = schemas["CreateEndpointRequest"]["properties"]["progress_interval_s"]
    assert (created_schema["minimum"], created_schema["maximum"]) == (1, 3600)


@pytest.mark.parametrize("progress", ["job.progress", "batch.progress"])
async def test_a_jobs_own_webhook_cannot_take_progress(make_api: Any, progress: str) -> None:
    """Progress goes to endpoints only: their interval throttles it."""
    api = await make_api(**DEV)
    refused = await api.call(
        "POST",
        "/v1/jobs",
        json={**CHAT, "webhook": {"url": "https://1.1.1.1/", "event_types": [progress]}},
    )
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["param"] == "webhook.event_types"
    assert progress in refused.json()["error"]["message"]
    assert "/v1/webhook_endpoints" in refused.json()["error"]["message"]
    listed = await api.call(
        "POST", "/v1/webhook_endpoints", json={"url": "https://1.1.1.1/", "event_types": [progress]}
    )
    assert listed.status_code == 201, listed.text


async def test_rotate_secret_shows_the_new_secret_once(make_api: Any, clock: FakeClock) -> None:
    api = await make_api(**DEV)
    created = (
        await api.call("POST", "/v1/webhook_endpoints", json={"url": "http://127.0.0.1:9/"})
    ).json()
    path = f"/v1/webhook_endpoints/{created['id']}"
    rotated = await api.call("POST", f"{path}/rotate_secret")
    assert rotated.status_code == 200
    body = rotated.json()
    assert body["secret"].startswith("whsec_") and body["secret"] != created["secret"]
    now = int(clock.now().timestamp())  # PostgreSQL stamps with its own clock: a bit later
    assert now + 86_400 <= body["previous_secret_expires_at"] <= now + 86_400 + 60
    immediate = (await api.call("POST", f"{path}/rotate_secret", json={"grace_period_s": 0})).json()
    assert immediate["previous_secret_expires_at"] is None
    too_long = await api.call("POST", f"{path}/rotate_secret", json={"grace_period_s": 10**7})
    assert too_long.status_code == 400


async def test_test_ping_answers_the_attempt(make_api: Any, receiver: WebhookReceiver) -> None:
    api = await make_api(**DEV)
    created = (await api.call("POST", "/v1/webhook_endpoints", json={"url": receiver.url})).json()
    path = f"/v1/webhook_endpoints/{created['id']}/test"
    answer = (await api.call("POST", path)).json()
    assert answer["object"] == "webhook_test" and answer["succeeded"] is True
    assert answer["status_code"] == 200 and answer["error"] is None
    [ping] = receiver.received
    payload = verify_webhook(ping.body, ping.headers, created["secret"])
    assert payload["type"] == "ping" and payload["id"] == answer["event_id"]
    assert payload["data"] == {"endpoint_id": created["id"]}
    receiver.script = lambda _r, _i: Reply(500)
    failed = (await api.call("POST", path)).json()
    assert failed["succeeded"] is False and failed["status_code"] == 500
    assert failed["error"] == "HTTP 500"


async def test_test_ping_to_a_rebound_name_reaches_nothing(
    make_api: Any, receiver: WebhookReceiver
) -> None:
    api = await make_api(webhook_allow_http=True)
    dns = {"rebind.test": ["93.184.216.34"]}
    api.fake_dns(dns)
    url = f"http://rebind.test:{receiver.port}/hook"
    created = (await api.call("POST", "/v1/webhook_endpoints", json={"url": url})).json()
    dns["rebind.test"] = ["127.0.0.1"]
    answer = (await api.call("POST", f"/v1/webhook_endpoints/{created['id']}/test")).json()
    assert answer["succeeded"] is False and answer["error"] == "refused: loopback"
    assert receiver.count == 0


async def test_webhook_secret_is_the_tenants(make_api: Any, storage: Storage) -> None:
    api = await make_api()
    tenant = await storage.tenant_get(name="acme")
    assert tenant is not None
    assert (await api.call("GET", "/v1/webhook_secret")).json() == {"secret": tenant.webhook_secret}
    assert (await api.client.get("/v1/webhook_secret")).status_code == 401


async def test_deliveries_list_every_attempt_and_recover(
    make_api: Any, storage: Storage, clock: FakeClock, receiver: WebhookReceiver
) -> None:
    api = await make_api(**DEV)
    receiver.script = lambda _r, _i: Reply(500)
    endpoint = (await api.call("POST", "/v1/webhook_endpoints", json={"url": receiver.url})).json()
    submitted = await api.call("POST", "/v1/jobs", json={**CHAT, "webhook": {"url": receiver.url}})
    assert submitted.status_code == 202, submitted.text
    job_id = submitted.json()["id"]
    # The submit used the database's clock, which kept moving while the test set up (seconds on
    # a loaded machine); step the fake one past it.
    clock.set(max(clock.now(), SystemClock().now()) + timedelta(seconds=2))
    claimed = await storage.job_claim(worker_id="w", limit=1, lease_ttl_s=30, now=clock.now())
    assert [j.id for j in claimed] == [job_id]
    await storage.job_cancel(job_id=job_id, tenant_id=claimed[0].tenant_id, actor="api")
    from jobgate.domain.job import Lease
    from jobgate.domain.states import JobState
    from jobgate.domain.verdicts import Finish

    await finish_one(
        storage,
        finish=Finish(
            lease=Lease(job_id, claimed[0].lease_token or ""),
            state=JobState.CANCELLED,
            reason="cancel_requested",
        ),
        now=clock.now(),
    )
    dispatcher = Dispatcher(
        storage=storage,
        settings=api.ctx.settings,
        clock=clock,
        guard=api.ctx.jobs.webhook_guard,
        rng=random.Random(1),
    )
    try:
        await dispatcher.deliver_once(now=clock.now())
        clock.advance(7)
        receiver.script = lambda _r, _i: Reply(204)
        await dispatcher.deliver_once(now=clock.now())
    finally:
        await dispatcher.aclose()

    listed = await api.call("GET", f"/v1/jobs/{job_id}/deliveries")
    assert listed.status_code == 200
    deliveries = {d["endpoint_id"]: d for d in listed.json()["data"]}
    assert set(deliveries) == {endpoint["id"], None}
    for delivery in deliveries.values():
        assert delivery["object"] == "webhook_delivery"
        assert delivery["event_type"] == "job.cancelled"
        assert delivery["status"] == "succeeded" and delivery["last_status_code"] == 204
        attempts = delivery["attempts"]
        assert [(a["attempt"], a["status_code"], a["succeeded"]) for a in attempts] == [
            (1, 500, False),
            (2, 204, True),
        ]
        assert attempts[0]["error"] == "HTTP 500" and attempts[1]["error"] is None
        assert all(isinstance(a["latency_ms"], int) for a in attempts)
    assert deliveries[None]["url"] == receiver.url
    other = await make_api("beta")
    assert (await other.call("GET", f"/v1/jobs/{job_id}/deliveries")).status_code == 404

    path = f"/v1/webhook_endpoints/{endpoint['id']}"
    since = {"since": int(clock.now().timestamp()) - 60}
    recovered = await api.call("POST", f"{path}/recover", json=since)
    assert recovered.json() == {
        "object": "webhook_recovery",
        "endpoint_id": endpoint["id"],
        "requeued": 0,  # nothing failed
    }
    await api.call("PATCH", path, json={"disabled": True})
    refused = await api.call("POST", f"{path}/recover", json=since)
    assert refused.status_code == 409 and refused.json()["code"] == "endpoint_disabled"
