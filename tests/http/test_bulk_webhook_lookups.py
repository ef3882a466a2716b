"""A bulk call whose items name webhook URLs answers in seconds however slow DNS is, on both
backends: the call's lookups run side by side (bounded), each host is looked up once per call,
and a lookup that hangs is cut short (its item refused `unresolvable`, the others stored).
DNS is a fake here, slow as a real resolver is for a name that does not exist."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import pytest

from jobgate.config import Settings
from jobgate.services import webhook_guard
from tests.api_server import Api

CHAT = "/v1/chat/completions"
LOOKUP_S = 0.2  # what one lookup of a name that does not exist took on the reporter's network


@pytest.fixture
def settings() -> Settings:
    return Settings(database_url="sqlite:///unused.db", webhook_allow_http=False)


class SlowDns:
    """Every name takes LOOKUP_S to fail, but `good-*` names, which answer a public address;
    `hang-*` names never answer."""

    def __init__(self) -> None:
        self.looked_up: list[str] = []
        self.running = 0
        self.most = 0

    async def __call__(self, host: str, port: int) -> Sequence[str]:
        self.looked_up.append(host)
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            if host.startswith("hang-"):
                await asyncio.sleep(3600)
            await asyncio.sleep(LOOKUP_S)
            if host.startswith("good-"):
                return ["93.184.216.34"]
            raise OSError(-2, "Name or service not known")
        finally:
            self.running -= 1


def _item(n: int, host: str) -> dict[str, Any]:
    body = {"model": "sim-echo", "messages": [{"role": "user", "content": f"n{n}"}]}
    return {"endpoint": CHAT, "body": body, "webhook": {"url": f"https://{host}/hook"}}


async def test_a_thousand_unresolvable_webhooks_answer_in_seconds(api: Api) -> None:
    dns = SlowDns()
    api.runtime.jobs.webhook_guard.resolver = dns
    key = await api.key("acme")
    items = [_item(n, f"nowhere-{n}.example") for n in range(1000)]
    items[10] = _item(10, "good-1.example")
    items[11] = _item(11, "good-1.example")  # the same host: one lookup
    started = time.monotonic()
    answer = await api.http.post(
        "/v1/jobs/bulk", json={"jobs": items}, headers={"Authorization": f"Bearer {key}"}
    )
    took = time.monotonic() - started
    assert answer.status_code == 200, answer.text
    data = answer.json()["data"]
    # One after another these lookups take 1000 x 0.2 s = 200 s.
    assert took < 30, took
    assert dns.most <= webhook_guard.LOOKUP_CONCURRENCY
    assert sorted(dns.looked_up) == sorted(
        {f"nowhere-{n}.example" for n in range(1000) if n not in (10, 11)} | {"good-1.example"}
    )
    assert data[10]["status"] == data[11]["status"] == "queued"
    refused = [d for n, d in enumerate(data) if n not in (10, 11)]
    assert {d["error"]["code"] for d in refused} == {"webhook_url_refused"}
    assert {d["error"]["param"] for d in refused} == {"webhook.url"}


async def test_a_lookup_that_hangs_is_cut_short(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(webhook_guard, "LOOKUP_TIMEOUT_S", 0.5)
    dns = SlowDns()
    api.runtime.jobs.webhook_guard.resolver = dns
    key = await api.key("acme")
    items = [_item(0, "hang-1.example"), _item(1, "good-2.example")]
    started = time.monotonic()
    answer = await api.http.post(
        "/v1/jobs/bulk", json={"jobs": items}, headers={"Authorization": f"Bearer {key}"}
    )
    assert time.monotonic() - started < 10
    hung, good = answer.json()["data"]
    assert hung["error"]["code"] == "webhook_url_refused"
    assert "did not resolve within" in hung["error"]["message"]
    assert good["status"] == "queued"
    single = await api.http.post(
        "/v1/jobs", json=_item(2, "hang-2.example"), headers={"Authorization": f"Bearer {key}"}
    )
    assert single.status_code == 422, single.text  # a single submit has the same bound
    assert "did not resolve within" in single.json()["error"]["message"]
