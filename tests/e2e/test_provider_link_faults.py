"""A TCP proxy between the worker process and the provider simulator server: network faults on
the provider link end in the classified outcomes of docs/providers.md, with real processes
(api, worker, dispatcher on PostgreSQL) and a real HTTP client (the `openai` adapter):

- delayed, within `request_timeout_s`: no failure; the job succeeds on its first attempt;
- connection refused (a RST answers the SYN, so nothing left): retryable; retried, it
  succeeds, and the provider saw one create;
- reset after the create was sent: an unknown outcome; failed `creation_outcome_unknown`,
  never sent again;
- blackholed after the create was sent, past `request_timeout_s`: an unknown outcome; failed
  as above, or, with idempotent creates, sent again and answered with the original.

In every case the provider did the work at most once, jobgate records one terminal event, and
the user's endpoint receives one terminal event.
"""

from __future__ import annotations

import pytest

from jobgate.testing.receiver import WebhookReceiver
from tests.e2e.provider_stack import Stack, proxied, start_stack
from tests.support.processes import ProcessHarness, wait_until
from tests.support.proxy import TcpProxy

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

CHAT = "/v1/chat/completions"
REQUEST_TIMEOUT_S = 3.0
PROVIDER_WORK_S = 2.0  # how long the provider takes to answer a create in the slow cases


def _stack(
    harness: ProcessHarness,
    pg_dsn: str,
    receiver: WebhookReceiver,
    proxies: list[TcpProxy],
    *,
    idempotent: bool = False,
) -> tuple[Stack, TcpProxy]:
    stack = start_stack(
        harness,
        pg_dsn,
        receiver,
        roles=("worker", "dispatcher"),
        role_provider_url={"worker": proxied(proxies)},
        provider={
            "request_timeout_s": REQUEST_TIMEOUT_S,
            "connect_timeout_s": 2,
            "idempotent_creates": idempotent,
            "breaker_reset_s": 1,
        },
        simulator_args=("--idempotent",) if idempotent else (),
        env={
            "JOBGATE_MAX_ATTEMPTS": "10",
            "JOBGATE_RETRY_BASE_S": "0.3",
            "JOBGATE_RETRY_MAX_S": "1",
        },
    )
    (link,) = proxies
    return stack, link


def _wait_sent(stack: Stack, job_id: str) -> None:
    """Until the provider has received the job's create (it then works PROVIDER_WORK_S)."""
    wait_until(lambda: stack.creates_sent(job_id, CHAT) == 1, what="the create to arrive")


def test_provider_link_delayed_within_the_timeout_succeeds_once(
    harness: ProcessHarness, pg_dsn: str, receiver: WebhookReceiver, proxies: list[TcpProxy]
) -> None:
    stack, link = _stack(harness, pg_dsn, receiver, proxies)
    link.delay(0.5)  # each way: a slow network, not a failure
    job_id = stack.submit_chat()
    job = stack.assert_settled_once(job_id)
    assert job["attempt"] == 1 and job["creation_outcome"] is None
    assert stack.creates_sent(job_id, CHAT) == 1
    assert stack.sim_state()["created"] == [job["result"]["id"]]


def test_provider_link_refused_before_sending_is_retryable(
    harness: ProcessHarness, pg_dsn: str, receiver: WebhookReceiver, proxies: list[TcpProxy]
) -> None:
    stack, link = _stack(harness, pg_dsn, receiver, proxies)
    link.refuse()
    job_id = stack.submit_chat()
    retried = stack.wait_event(job_id, "retryable_error")
    assert retried["to"] == "queued"
    assert stack.creates_sent(job_id, CHAT) == 0  # nothing reached the provider
    link.heal()
    job = stack.assert_settled_once(job_id)
    assert job["attempt"] >= 2 and job["creation_outcome"] is None
    assert stack.creates_sent(job_id, CHAT) == 1
    assert stack.sim_state()["created"] == [job["result"]["id"]]


def test_provider_link_reset_after_sending_is_an_unknown_outcome(
    harness: ProcessHarness, pg_dsn: str, receiver: WebhookReceiver, proxies: list[TcpProxy]
) -> None:
    stack, link = _stack(harness, pg_dsn, receiver, proxies)
    job_id = stack.submit_chat(sim={"latency_s": PROVIDER_WORK_S})
    _wait_sent(stack, job_id)
    link.reset()  # while the provider works on it
    job = stack.assert_settled_once(job_id, "failed")
    link.heal()
    assert job["creation_outcome"] == "unknown"
    assert job["error"]["code"] == "creation_outcome_unknown"
    assert job["attempt"] == 1
    assert stack.creates_sent(job_id, CHAT) == 1  # not sent again
    assert len(stack.sim_state()["created"]) == 1  # and the provider did run it


@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent_creates"])
def test_provider_link_blackholed_past_the_timeout_is_an_unknown_outcome(
    harness: ProcessHarness,
    pg_dsn: str,
    receiver: WebhookReceiver,
    proxies: list[TcpProxy],
    idempotent: bool,
) -> None:
    stack, link = _stack(harness, pg_dsn, receiver, proxies, idempotent=idempotent)
    job_id = stack.submit_chat(sim={"latency_s": PROVIDER_WORK_S})
    _wait_sent(stack, job_id)
    link.blackhole()  # the provider's answer never comes back
    if not idempotent:
        job = stack.assert_settled_once(job_id, "failed")
        assert job["creation_outcome"] == "unknown"
        assert job["error"]["code"] == "creation_outcome_unknown"
        assert stack.creates_sent(job_id, CHAT) == 1
        assert len(stack.sim_state()["created"]) == 1
        return
    # Heal at once: the blackholed connection stays dead, so the first create's answer is
    # still lost, while the retry (full jitter: it may start within milliseconds of the
    # timeout) reaches the provider on a new connection.
    link.heal()
    unknown = stack.wait_event(job_id, "retryable_error")
    assert unknown["to"] == "queued"
    job = stack.assert_settled_once(job_id)
    # Sent twice, run once: the provider answered the second create with the first result.
    assert job["creation_outcome"] == "unknown" and job["attempt"] == 2
    assert stack.creates_sent(job_id, CHAT) == 2
    assert stack.sim_state()["created"] == [job["result"]["id"]]
