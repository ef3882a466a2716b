"""Job tokens through the Python client against a real `jobgate serve`: the tenant's client
creates one, and a client built with it reads, waits for, follows and (with `cancel`) cancels
that job, and nothing else."""

from __future__ import annotations

import json
import subprocess

import pytest

from jobgate.client import AsyncClient, AuthenticationError, Client, JobToken
from tests.client.server import JOBGATE, JobgateServer, wait_until

pytestmark = pytest.mark.e2e
CHAT = "/v1/chat/completions"


def chat(text: str, **sim: object) -> dict[str, object]:
    body: dict[str, object] = {"model": "sim-echo", "messages": [{"role": "user", "content": text}]}
    if sim:
        body["sim"] = sim
    return body


def test_a_token_client_follows_its_job_only(served: JobgateServer) -> None:
    with Client(served.url, served.api_key) as tenant:
        job = tenant.submit(CHAT, chat("tokens for browsers", latency_s=0.5), stream=True)
        other = tenant.submit(CHAT, chat("someone else's"))
        token = tenant.create_job_token(job.id, ttl_s=120)
    assert isinstance(token, JobToken) and token.token.startswith("jgt_")
    assert (token.job_id, token.scopes) == (job.id, ("read", "stream"))

    with Client(served.url, token=token.token) as browser:
        text = "".join(browser.stream(job.id))
        assert "tokens for browsers" in text
        assert browser.wait(job.id, timeout_s=30).status == "succeeded"
        assert browser.get(job.id).id == job.id
        assert [e.to_status for e in browser.events(job.id)][-1] == "succeeded"
        for refused in (
            lambda: browser.get(other.id),
            lambda: browser.cancel(job.id),
            lambda: browser.submit(CHAT, chat("no")),
            lambda: browser.list(),
            lambda: browser.create_job_token(job.id),
        ):
            with pytest.raises(AuthenticationError):
                refused()


async def test_a_cancel_token_cancels_through_the_async_client(served: JobgateServer) -> None:
    async with AsyncClient(served.url, served.api_key) as tenant:
        job = await tenant.submit(CHAT, chat("hold", fail_with="hang"))
        token = await tenant.create_job_token(job.id, scopes=["cancel", "read"])
    assert token.scopes == ("read", "cancel")
    async with AsyncClient(served.url, token=token.token) as phone:
        assert (await phone.cancel(job.id)).cancel_requested_at is not None
        assert (await phone.wait(job.id, timeout_s=30)).status == "cancelled"


def test_a_key_and_a_token_are_not_both_given(served: JobgateServer) -> None:
    with pytest.raises(ValueError, match="not both"):
        Client(served.url, served.api_key, token="jgt_x.y")


def rotate(served: JobgateServer, *flags: str) -> dict[str, object]:
    done = subprocess.run(
        [*JOBGATE, "job-tokens", "rotate", "--json", "--database-url", served.database_url, *flags],
        env=served.env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    answer: dict[str, object] = json.loads(done.stdout)
    return answer


def test_the_operator_rotates_the_secret_of_a_running_server(served: JobgateServer) -> None:
    with Client(served.url, served.api_key) as tenant:
        job = tenant.submit(CHAT, chat("rotated"))
        before = tenant.create_job_token(job.id).token
    with Client(served.url, token=before) as browser:
        assert browser.get(job.id).id == job.id
    rotated = rotate(served, "--revoke")
    assert rotated["revoked_older"] is True and isinstance(rotated["generation"], int)

    def refused() -> bool:
        with Client(served.url, token=before, max_retries=0) as browser:
            try:
                browser.get(job.id)
            except AuthenticationError:
                return True
            return False

    wait_until(refused, timeout_s=30, message="the revoked token refused")  # within ~5 s
    with Client(served.url, served.api_key) as tenant:
        after = tenant.create_job_token(job.id).token
    with Client(served.url, token=after) as browser:
        assert browser.get(job.id).id == job.id
