"""The dispatcher against a real local HTTP receiver, on both backends, with a fake clock for the
schedule: retries, redirects, timeouts, 410, Retry-After, the per-endpoint cap, payloads and
signatures that third-party libraries verify."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import random
from collections.abc import AsyncIterator, Iterator, Sequence
from datetime import timedelta
from typing import Any

import openai
import orjson
import pytest
import standardwebhooks
import svix.webhooks
from prometheus_client import REGISTRY

from jobgate.client.webhooks import verify_webhook
from jobgate.config import Settings
from jobgate.domain import ssrf
from jobgate.domain.states import JobState
from jobgate.roles.dispatcher import Dispatcher
from jobgate.services.webhook_guard import UrlGuard
from jobgate.services.webhook_transport import WebhookSender
from jobgate.storage.protocol import Storage
from jobgate.storage.records import Tenant, WebhookEndpoint
from jobgate.testing import FakeClock
from jobgate.testing.receiver import Received, Reply, WebhookReceiver
from tests.storage.helpers import make_tenant
from tests.storage.webhook_helpers import finish_job, make_endpoint

pytestmark = pytest.mark.asyncio


def dev_settings(**fields: Any) -> Settings:
    values: dict[str, Any] = {
        "webhook_allow_http": True,
        "webhook_allow_cidrs": ("127.0.0.0/8",),
        "webhook_timeout_s": 5.0,
    }
    values.update(fields)
    return Settings(**values)


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver() as running:
        yield running


@pytest.fixture
async def make_dispatcher(storage: Storage, clock: FakeClock) -> AsyncIterator[Any]:
    made: list[Dispatcher] = []

    def build(**kwargs: Any) -> Dispatcher:
        settings = kwargs.pop("settings", None) or dev_settings()
        dispatcher = Dispatcher(
            storage=storage, settings=settings, clock=clock, rng=random.Random(3), **kwargs
        )
        made.append(dispatcher)
        return dispatcher

    yield build
    for dispatcher in made:
        await dispatcher.aclose()


async def setup(
    storage: Storage, clock: FakeClock, url: str, **fields: Any
) -> tuple[Tenant, WebhookEndpoint]:
    tenant = await make_tenant(storage)
    endpoint = await make_endpoint(storage, tenant, clock, url=url, **fields)
    return tenant, endpoint


def failed_count(reason: str) -> float:
    value = REGISTRY.get_sample_value("jobgate_webhook_deliveries_failed_total", {"reason": reason})
    return value or 0.0


def signature_matches(request: Received, secret: str) -> bool:
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = (
        f"{request.headers['webhook-id']}.{request.headers['webhook-timestamp']}.".encode()
        + request.body
    )
    expected = "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    return expected in request.headers["webhook-signature"].split()


def replies(*answers: Reply, then: Reply | None = None) -> Any:
    def script(_request: Received, index: int) -> Reply:
        return answers[index] if index < len(answers) else (then or Reply())

    return script


# -- retries ---------------------------------------------------------------------------------


async def test_fails_twice_then_accepts_three_attempts_one_id(
    storage: Storage, clock: FakeClock, receiver: WebhookReceiver, make_dispatcher: Any
) -> None:
    receiver.script = replies(Reply(500), Reply(503))
    tenant, endpoint = await setup(storage, clock, receiver.url)
    job = await finish_job(storage, clock, tenant)
    dispatcher = make_dispatcher()

    first = await dispatcher.deliver_once(now=clock.now())
    assert (first.claimed, first.retrying) == (1, 1)
    [row] = await storage.outbox_for_job(job_id=job.id)
    delay = (row.next_attempt_at - clock.now()).total_seconds()
    assert 4.0 <= delay <= 6.0  # 5 s ± 20%
    assert (await dispatcher.deliver_once(now=clock.advance(delay - 0.5))).claimed == 0
    second = await dispatcher.deliver_once(now=clock.advance(0.501))
    assert second.retrying == 1
    [row] = await storage.outbox_for_job(job_id=job.id)
    delay = (row.next_attempt_at - clock.now()).total_seconds()
    assert 240.0 <= delay <= 360.0  # 5 min ± 20%
    third = await dispatcher.deliver_once(now=clock.advance(delay + 0.001))
    assert third.succeeded == 1

    assert receiver.count == 3
    assert len({r.headers["webhook-id"] for r in receiver.received}) == 1
    assert receiver.received[0].headers["webhook-id"] == row.event_id
    stamps = [int(r.headers["webhook-timestamp"]) for r in receiver.received]
    assert stamps == sorted(stamps) and stamps[0] < stamps[-1]  # each attempt signs anew
    assert all(signature_matches(r, endpoint.secret) for r in receiver.received)
    assert len({r.body for r in receiver.received}) == 1  # the same event every time
    [row] = await storage.outbox_for_job(job_id=job.id)
    assert (row.state, row.attempts, row.last_status_code) == ("succeeded", 3, 200)
    attempts = await storage.delivery_attempts_for_job(job_id=job.id)
    assert [(a.attempt, a.status_code, a.succeeded) for a in attempts] == [
        (1, 500, False),
        (2, 503, False),
        (3, 200, True),
    ]
    assert attempts[0].error == "HTTP 500"
    assert (await dispatcher.deliver_once(now=clock.advance(86_400))).claimed == 0


async def test_gives_up_after_the_last_attempt_and_counts_it(
    storage: Storage, clock: FakeClock, receiver: WebhookReceiver, make_dispatcher: Any
) -> None:
    receiver.script = lambda _r, _i: Reply(500)
    tenant, _ = await setup(storage, clock, receiver.url)
    job = await finish_job(storage, clock, tenant)
    dispatcher = make_dispatcher()
    before = failed_count("exhausted")
    for attempt in range(1, 11):
        done = await dispatcher.deliver_once(now=clock.now())
        assert done.claimed == 1, attempt
        [row] = await storage.outbox_for_job(job_id=job.id)
        clock.set(max(clock.now(), row.next_attempt_at + timedelta(milliseconds=1)))
    assert done.failed == 1
    [row] = await storage.outbox_for_job(job_id=job.id)
    assert (row.state, row.attempts) == ("failed", 10)
    assert failed_count("exhausted") == before + 1
    assert receiver.count == 10
    # The standard schedule: about three days from the first attempt to the last.
    first, last = (await storage.delivery_attempts_for_job(job_id=job.id))[::9]
    span_s = (last.created_at - first.created_at).total_seconds()
    assert 0.8 * 241_205 <= span_s <= 1.2 * 241_205


async def test_the_short_profile_is_seconds_apart(
    storage: Storage, clock: FakeClock, receiver: WebhookReceiver, make_dispatcher: Any
) -> None:
    receiver.script = lambda _r, _i: Reply(500)
    tenant, _ = await setup(storage, clock, receiver.url)
    job = await finish_job(storage, clock, tenant)
    dispatcher = make_dispatcher(settings=dev_settings(webhook_retry_profile="short"))
    await dispatcher.deliver_once(now=clock.now())
    [row] = await storage.outbox_for_job(job_id=job.id)
    assert 0.8 <= (row.next_attempt_at - clock.now()).total_seconds() <= 1.2


# -- what a receiver answers -----------------------------------------------------------------


async def test_redirects_are_not_followed_and_count_as_failures(
    storage: Storage, clock: FakeClock, make_dispatcher: Any
) -> None:
    with WebhookReceiver() as target, WebhookReceiver() as redirector:
        redirector.script = lambda _r, _i: Reply(302, {"location": target.url})
        tenant, _ = await setup(storage, clock, redirector.url)
        job = await finish_job(storage, clock, tenant)
        done = await make_dispatcher().deliver_once(now=clock.now())
        assert done.retrying == 1
        assert redirector.count == 1 and target.count == 0
        [attempt] = await storage.delivery_attempts_for_job(job_id=job.id)
        assert attempt.status_code == 302 and not attempt.succeeded
        assert attempt.error is not None and "redirect" in attempt.error


async def test_a_timeout_is_a_failed_attempt(
    storage: Storage, clock: FakeClock, receiver: WebhookReceiver, make_dispatcher: Any
) -> None:
    receiver.script = lambda _r, _i: Reply(200, delay_s=5)
    tenant, _ = await setup(storage, clock, receiver.url)
    job = await finish_job(storage, clock, tenant)
    dispatcher = make_dispatcher(settings=dev_settings(webhook_timeout_s=0.3))
    done = await dispatcher.deliver_once(now=clock.now())
    assert done.retrying == 1 and receiver.count == 1
    [attempt] = await storage.delivery_attempts_for_job(job_id=job.id)
    assert attempt.status_code is None and attempt.error == "timeout after 0.3 s"
    assert attempt.latency_ms >= 250
    [row] = await storage.outbox_for_job(job_id=job.id)
    assert row.state == "pending" and row.next_attempt_at > clock.now()


async def test_410_disables_the_endpoint(
    storage: Storage, clock: FakeClock, receiver: WebhookReceiver, make_dispatcher: Any
) -> None:
    receiver.script = lambda _r, _i: Reply(410)
    tenant, endpoint = await setup(storage, clock, receiver.url)
    job = await finish_job(storage, clock, tenant, webhook={"url": receiver.url})
    before = failed_count("gone")
    done = await make_dispatcher().deliver_once(now=clock.now())
    assert done.failed == 2
    assert failed_count("gone") == before + 2
    rows = await storage.outbox_for_job(job_id=job.id)
    assert {(r.target, r.state, r.last_status_code) for r in rows} == {
        (endpoint.id, "failed", 410),
        ("job", "failed", 410),
    }
    disabled = await storage.webhook_endpoint_get(endpoint_id=endpoint.id)
    assert disabled is not None and disabled.disabled and disabled.disabled_reason == "gone"
    later = await finish_job(storage, clock, tenant)
    assert await storage.outbox_for_job(job_id=later.id) == []


@pytest.mark.parametrize(
    ("status", "retry_after", "expected_s"),
    [(429, "120", 120.0), (503, "45", 45.0), (429, "86400", 3600.0), (503, "7200", 3600.0)],
)
async def test_429_and_503_honour_retry_after_capped_at_an_hour(
    storage: Storage,
    clock: FakeClock,
    receiver: WebhookReceiver,
    make_dispatcher: Any,
    status: int,
    retry_after: str,
    expected_s: float,
) -> None:
    receiver.script = replies(Reply(status, {"retry-after": retry_after}))
    tenant, _ = await setup(storage, clock, receiver.url)
    job = await finish_job(storage, clock, tenant)
    dispatcher = make_dispatcher()
    await dispatcher.deliver_once(now=clock.now())
    [row] = await storage.outbox_for_job(job_id=job.id)
    assert row.next_attempt_at == clock.now() + timedelta(seconds=expected_s)
    assert (await dispatcher.deliver_once(now=clock.advance(expected_s - 1))).claimed == 0
    assert (await dispatcher.deliver_once(now=clock.advance(1))).succeeded == 1


# -- the per-endpoint cap --------------------------------------------------------------------


async def test_one_pass_respects_the_per_endpoint_cap(
    storage: Storage, clock: FakeClock, receiver: WebhookReceiver, make_dispatcher: Any
) -> None:
    receiver.script = lambda _r, _i: Reply(200, delay_s=0.2)
    tenant, _ = await setup(storage, clock, receiver.url)
    for _ in range(5):
        await finish_job(storage, clock, tenant)
    dispatcher = make_dispatcher(endpoint_concurrency=2)
    done = await dispatcher.deliver_once(now=clock.now(), limit=10)
    assert (done.claimed, done.succeeded, done.released) == (2, 2, 3)
    assert receiver.max_concurrent == 2
    while (await dispatcher.deliver_once(now=clock.now(), limit=10)).claimed:
        pass
    assert receiver.count == 5 and receiver.max_concurrent == 2


async def test_the_loop_keeps_each_endpoint_under_its_cap(
    storage: Storage, clock: FakeClock, make_dispatcher: Any
) -> None:
    with WebhookReceiver() as slow, WebhookReceiver() as fast:
        slow.script = lambda _r, _i: Reply(200, delay_s=0.15)
        tenant, _ = await setup(storage, clock, slow.url)
        await make_endpoint(storage, tenant, clock, url=fast.url)
        for _ in range(8):
            await finish_job(storage, clock, tenant)
        dispatcher = make_dispatcher(endpoint_concurrency=3, poll_interval_s=0.05)
        running = asyncio.create_task(dispatcher.run())
        try:
            assert await asyncio.to_thread(fast.wait_for, 8, 30)
            assert await asyncio.to_thread(slow.wait_for, 8, 30)
        finally:
            dispatcher.request_stop()
            await running
        assert slow.max_concurrent == 3  # capped, and the cap was used
        assert fast.count == 8 and slow.count == 8


# -- payloads and signatures -----------------------------------------------------------------


async def test_thin_payload_by_default(
    storage: Storage, clock: FakeClock, receiver: WebhookReceiver, make_dispatcher: Any
) -> None:
    tenant, endpoint = await setup(storage, clock, receiver.url)
    job = await finish_job(storage, clock, tenant, result={"secret": "s3cr3t"})
    await make_dispatcher().deliver_once(now=clock.now())
    [request] = receiver.received
    assert verify_webhook(request.body, request.headers, endpoint.secret) == {
        "id": request.headers["webhook-id"],
        "object": "event",
        "type": "job.succeeded",
        "created_at": int(job.updated_at.timestamp()),
        "data": {"id": job.id, "status": "succeeded"},
    }
    assert request.headers["content-type"] == "application/json"
    assert request.headers["user-agent"].startswith("jobgate-webhooks/")


async def test_full_results_on_opt_in_truncated_above_256_kib(
    storage: Storage, clock: FakeClock, receiver: WebhookReceiver, make_dispatcher: Any
) -> None:
    tenant, endpoint = await setup(storage, clock, receiver.url, include_result=True)
    small = await finish_job(storage, clock, tenant, result={"answer": 42})
    big = await finish_job(storage, clock, tenant, result={"text": "x" * (300 * 1024)})
    await make_dispatcher().deliver_once(now=clock.now())
    assert receiver.count == 2
    by_job = {}
    for request in receiver.received:
        payload = verify_webhook(request.body, request.headers, endpoint.secret)
        by_job[payload["data"]["id"]] = (payload["data"], len(request.body))
    data, _ = by_job[small.id]
    assert data["result"] == {"answer": 42} and data["result_truncated"] is False
    assert data["status"] == "succeeded" and "usage" in data
    data, size = by_job[big.id]
    assert data["result"] is None and data["result_truncated"] is True
    assert size <= 256 * 1024


async def test_deliveries_verify_with_third_party_libraries_during_a_rotation(
    storage: Storage, clock: FakeClock, receiver: WebhookReceiver, make_dispatcher: Any
) -> None:
    tenant, endpoint = await setup(storage, clock, receiver.url)
    rotated = await storage.webhook_endpoint_rotate_secret(
        endpoint_id=endpoint.id,
        tenant_id=tenant.id,
        secret="whsec_" + base64.b64encode(b"n" * 32).decode(),
        grace_s=3600,
        now=clock.now(),
    )
    assert rotated is not None
    await finish_job(storage, clock, tenant, api="responses")
    await make_dispatcher().deliver_once(now=clock.now())
    [request] = receiver.received
    assert len(request.headers["webhook-signature"].split()) == 2
    for secret in (endpoint.secret, rotated.secret):
        assert verify_webhook(request.body, request.headers, secret)["type"] == (
            "response.completed"
        )
        standardwebhooks.Webhook(secret).verify(request.body, request.headers)
        svix.webhooks.Webhook(secret).verify(request.body, request.headers)
        client = openai.OpenAI(api_key="unused", webhook_secret=secret)
        client.webhooks.verify_signature(request.body, request.headers)
        event = client.webhooks.unwrap(request.body, request.headers)
        assert type(event).__name__ == "ResponseCompletedWebhookEvent"
    # After the grace period only the new secret signs.
    await finish_job(storage, clock, tenant)
    clock.advance(3601)
    await make_dispatcher().deliver_once(now=clock.now())
    later = receiver.received[1]
    assert len(later.headers["webhook-signature"].split()) == 1
    assert signature_matches(later, rotated.secret)
    assert not signature_matches(later, endpoint.secret)


async def test_per_job_urls_are_signed_with_the_tenant_secret(
    storage: Storage, clock: FakeClock, receiver: WebhookReceiver, make_dispatcher: Any
) -> None:
    tenant = await storage.tenant_create(
        tenant_id="ten_signed",
        name="signed",
        webhook_secret="whsec_" + base64.b64encode(b"t" * 32).decode(),
    )
    job = await finish_job(
        storage, clock, tenant, webhook={"url": receiver.url, "event_types": ["job.running"]}
    )
    await make_dispatcher().deliver_once(now=clock.now())
    [request] = receiver.received
    payload = verify_webhook(request.body, request.headers, tenant.webhook_secret)
    assert payload["type"] == "job.running" and payload["data"] == {
        "id": job.id,
        "status": "running",
    }


async def test_disabled_endpoint_deliveries_fail_without_sending(
    storage: Storage, clock: FakeClock, receiver: WebhookReceiver, make_dispatcher: Any
) -> None:
    from jobgate.storage.records import EndpointChanges

    tenant, endpoint = await setup(storage, clock, receiver.url)
    job = await finish_job(storage, clock, tenant)
    await storage.webhook_endpoint_update(
        endpoint_id=endpoint.id, tenant_id=tenant.id, changes=EndpointChanges(disabled=True)
    )
    done = await make_dispatcher().deliver_once(now=clock.now())
    assert done.failed == 1 and receiver.count == 0
    [row] = await storage.outbox_for_job(job_id=job.id)
    assert (row.state, row.last_error) == ("failed", "endpoint disabled")


# -- SSRF at delivery time -------------------------------------------------------------------


def fake_dns(answers: dict[str, Sequence[str]]) -> Any:
    async def resolve(host: str, port: int) -> Sequence[str]:
        return answers[host]

    return resolve


async def test_dns_rebinding_after_registration_reaches_nothing(
    storage: Storage, clock: FakeClock, receiver: WebhookReceiver, make_dispatcher: Any
) -> None:
    dns: dict[str, Sequence[str]] = {"rebind.test": ["93.184.216.34"]}
    guard = UrlGuard(ssrf.UrlPolicy(allow_http=True), resolver=fake_dns(dns))
    url = f"http://rebind.test:{receiver.port}/hook"
    assert (await guard.resolve(url)).addresses == ("93.184.216.34",)  # passes registration
    tenant, _ = await setup(storage, clock, url)
    job = await finish_job(storage, clock, tenant)
    dns["rebind.test"] = ["127.0.0.1"]  # ... then the name is pointed at the receiver
    dispatcher = make_dispatcher(guard=guard)
    done = await dispatcher.deliver_once(now=clock.now())
    assert done.retrying == 1 and receiver.count == 0
    [attempt] = await storage.delivery_attempts_for_job(job_id=job.id)
    assert attempt.error == "refused: loopback" and attempt.status_code is None


async def test_a_redirect_to_loopback_reaches_nothing(
    storage: Storage, clock: FakeClock, make_dispatcher: Any
) -> None:
    # Only 127.0.0.2 is an operator network; the loopback receiver on 127.0.0.1 is not.
    policy = ssrf.UrlPolicy.build(allow_http=True, allow_cidrs=["127.0.0.2/32"])
    with WebhookReceiver() as inside, WebhookReceiver(host="127.0.0.2") as redirector:
        redirector.script = lambda _r, _i: Reply(307, {"location": inside.url})
        tenant, _ = await setup(storage, clock, redirector.url)
        await finish_job(storage, clock, tenant)
        await finish_job(storage, clock, tenant, webhook={"url": inside.url})
        dispatcher = make_dispatcher(guard=UrlGuard(policy))
        done = await dispatcher.deliver_once(now=clock.now())
        assert redirector.count == 2 and inside.count == 0  # one event per job to the endpoint
        assert (done.retrying, done.failed) == (2, 1)  # the literal loopback URL: for good


async def test_connects_to_the_vetted_address_keeping_the_host_name(
    storage: Storage, clock: FakeClock, receiver: WebhookReceiver, make_dispatcher: Any
) -> None:
    policy = ssrf.UrlPolicy.build(allow_http=True, allow_cidrs=["127.0.0.0/8"])
    guard = UrlGuard(policy, resolver=fake_dns({"hooks.test": ["127.0.0.1"]}))
    tenant, _ = await setup(storage, clock, f"http://hooks.test:{receiver.port}/in")
    await finish_job(storage, clock, tenant)
    done = await make_dispatcher(guard=guard).deliver_once(now=clock.now())
    assert done.succeeded == 1
    [request] = receiver.received
    assert request.headers["host"] == f"hooks.test:{receiver.port}" and request.path == "/in"


async def test_https_keeps_sni_and_certificate_checks_on_the_host_name() -> None:
    import ssl

    import trustme

    authority = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("hooks.test").configure_cert(server_context)
    client_context = ssl.create_default_context()
    authority.configure_trust(client_context)
    policy = ssrf.UrlPolicy.build(allow_cidrs=["127.0.0.0/8"])
    guard = UrlGuard(
        policy, resolver=fake_dns({"hooks.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]})
    )
    with WebhookReceiver(ssl_context=server_context) as tls:
        async with WebhookSender(guard, timeout_s=5, ssl_context=client_context) as sender:
            ok = await sender.send(f"https://hooks.test:{tls.port}/x", b"{}", {})
            assert ok.status_code == 200, ok.error
            # The same address under a name the certificate does not cover fails the TLS check.
            wrong = await sender.send(f"https://other.test:{tls.port}/x", b"{}", {})
            assert wrong.status_code is None and wrong.error is not None
        assert tls.count == 1
        assert tls.received[0].headers["host"] == f"hooks.test:{tls.port}"


async def test_payload_bytes_are_what_was_signed(
    storage: Storage, clock: FakeClock, receiver: WebhookReceiver, make_dispatcher: Any
) -> None:
    tenant, endpoint = await setup(storage, clock, receiver.url)
    await finish_job(storage, clock, tenant, state=JobState.FAILED)
    await make_dispatcher().deliver_once(now=clock.now())
    [request] = receiver.received
    assert orjson.loads(request.body)["type"] == "job.failed"
    assert signature_matches(request, endpoint.secret)


async def test_the_ssrf_corpus_reaches_nothing_at_delivery(
    storage: Storage, clock: FakeClock, receiver: WebhookReceiver, make_dispatcher: Any
) -> None:
    # Outbox rows written straight to storage, as if the URLs had slipped past registration:
    # the dispatcher must still refuse every spelling of the receiver's loopback address.
    port = receiver.port
    spellings = [
        "127.0.0.1",
        "2130706433",
        "0x7f.1",
        "0177.0.0.1",
        "0x7f000001",
        "127.1",
        "[::ffff:127.0.0.1]",
        "[::ffff:7f00:1]",
        "[::127.0.0.1]",
        "loopback.test",  # a name resolving to loopback (fake resolver)
        "localhost",  # the system resolver
    ]

    async def resolve(host: str, resolve_port: int) -> Sequence[str]:
        if host == "loopback.test":
            return ["127.0.0.1"]
        from jobgate.services.webhook_guard import system_resolver

        return await system_resolver(host, resolve_port)

    tenant = await make_tenant(storage)
    jobs = [
        await finish_job(storage, clock, tenant, webhook={"url": f"http://{host}:{port}/hook"})
        for host in spellings
    ]
    guard = UrlGuard(ssrf.UrlPolicy(allow_http=True), resolver=resolve)
    done = await make_dispatcher(guard=guard).deliver_once(now=clock.now(), limit=50)
    assert done.claimed == len(spellings)
    assert receiver.count == 0
    assert done.failed == len(spellings) - 2  # literals: refused for good
    assert done.retrying == 2  # names: DNS may answer otherwise later, retried (and refused)
    for job in jobs:
        [row] = await storage.outbox_for_job(job_id=job.id)
        assert row.last_error == "refused: loopback", row.url
