"""The simulator's test hooks over HTTP, for a simulator running in another process:
`GET /_simulator/state` and `POST /_simulator/inject`."""

from __future__ import annotations

import httpx

from jobgate.simulator.server import Simulator

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


async def test_state_shows_requests_creates_and_keys(simulator: Simulator) -> None:
    async with httpx.AsyncClient(base_url=simulator.url) as client:
        answer = await client.post(
            "/v1/chat/completions", json=CHAT, headers={"idempotency-key": "job_1"}
        )
        assert answer.status_code == 200
        state = (await client.get("/_simulator/state")).json()
    assert state["created"] == [answer.json()["id"]]
    assert state["requests"] == 1
    [logged] = state["request_log"]
    assert logged["at"] > 0
    assert {k: v for k, v in logged.items() if k != "at"} == {
        "method": "POST",
        "path": "/v1/chat/completions",
        "idempotency_key": "job_1",
    }
    assert state["deliveries"] == [] and state["cancel_calls"] == []


async def test_inject_fails_the_next_matching_requests(simulator: Simulator) -> None:
    async with httpx.AsyncClient(base_url=simulator.url) as client:
        injected = await client.post(
            "/_simulator/inject",
            json={"method": "post", "path_prefix": "/v1/chat/", "fault": "server_error",
                  "times": 2},
        )  # fmt: skip
        assert injected.status_code == 200
        statuses = [
            (await client.post("/v1/chat/completions", json=CHAT)).status_code for _ in range(3)
        ]
        assert statuses == [500, 500, 200]
        # The hooks are not provider requests.
        assert (await client.get("/_simulator/state")).json()["requests"] == 3


async def test_inject_rejects_what_it_cannot_do(simulator: Simulator) -> None:
    async with httpx.AsyncClient(base_url=simulator.url) as client:
        unknown = await client.post(
            "/_simulator/inject",
            json={"method": "GET", "path_prefix": "/v1/", "fault": "explode"},
        )
        assert unknown.status_code == 400 and "explode" in unknown.text
        incomplete = await client.post("/_simulator/inject", json={"fault": "server_error"})
        assert incomplete.status_code == 400
        assert (await client.get("/_simulator/nothing")).status_code == 404
        assert (await client.post("/v1/chat/completions", json=CHAT)).status_code == 200


async def test_state_tells_background_creates_from_synchronous_ones(simulator: Simulator) -> None:
    """A synchronous response is billed on each call (a retried stream creates one per
    attempt); only a background create is a provider job that a job must record."""
    body = {"model": "m", "input": "hi"}
    async with httpx.AsyncClient(base_url=simulator.url) as client:
        sync = await client.post("/v1/responses", json=body)
        background = await client.post("/v1/responses", json=body | {"background": True})
        assert sync.status_code == 200 and background.status_code == 200
        state = (await client.get("/_simulator/state")).json()
    assert state["created"] == [sync.json()["id"], background.json()["id"]]
    assert state["created_background"] == [background.json()["id"]]
