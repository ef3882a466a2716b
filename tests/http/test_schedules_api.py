"""Recurring schedules over real HTTP: create, list, read, pause, resume, delete;
another tenant's schedule is not found; bad input is 400, never 5xx."""

from __future__ import annotations

from typing import Any

import pytest

from jobgate.config import Settings
from tests.api_server import Api

JOB: dict[str, Any] = {
    "endpoint": "/v1/chat/completions",
    "body": {"model": "sim-echo", "messages": [{"role": "user", "content": "tick"}]},
    "concurrency_key": "nightly",
}


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def test_a_schedules_life(api: Api) -> None:
    key = await api.key("acme")
    created = await api.http.post(
        "/v1/schedules", json={"cron": "0 3 * * *", "job": JOB}, headers=auth(key)
    )
    assert created.status_code == 201, created.text
    schedule = created.json()
    assert schedule["object"] == "schedule" and schedule["id"].startswith("sched_")
    assert schedule["job"]["concurrency_key"] == "nightly" and not schedule["paused"]
    assert schedule["next_run_at"] % 86_400 == 3 * 3600
    listed = (await api.http.get("/v1/schedules", headers=auth(key))).json()
    assert [s["id"] for s in listed["data"]] == [schedule["id"]]
    path = f"/v1/schedules/{schedule['id']}"
    assert (await api.http.post(f"{path}/pause", headers=auth(key))).json()["paused"] is True
    assert (await api.http.post(f"{path}/resume", headers=auth(key))).json()["paused"] is False
    other = await api.key("other")
    assert (await api.http.get(path, headers=auth(other))).status_code == 404
    assert (await api.http.delete(path, headers=auth(key))).status_code == 200
    assert (await api.http.get(path, headers=auth(key))).status_code == 404
    assert (await api.http.delete(path, headers=auth(key))).status_code == 404


@pytest.mark.parametrize(
    "payload",
    [
        {"cron": "every day", "job": JOB},
        {"cron": "0 3 * * *", "job": {**JOB, "delay_s": 5}},
        {"cron": "0 3 * * *", "job": {**JOB, "body": {"model": "gpt-nowhere", "messages": []}}},
        {"cron": "0 3 * * *"},
        {"cron": "0 3 * * *", "job": JOB, "extra": 1},
    ],
)
async def test_bad_schedules_are_400(api: Api, payload: dict[str, Any]) -> None:
    key = await api.key("acme")
    response = await api.http.post("/v1/schedules", json=payload, headers=auth(key))
    assert response.status_code == 400, response.text


# Dates no month has, in every form cron takes them: none of them ever fires.
NEVER = ["0 0 30 2 *", "0 0 31 4 *", "15 6 31 6 *", "0 0 31 9 *", "0 0 31 11 *", "* * 30,31 2 *"]


@pytest.mark.parametrize("cron", NEVER)
async def test_a_cron_that_never_fires_is_400(api: Api, cron: str) -> None:
    key = await api.key("acme")
    response = await api.http.post(
        "/v1/schedules", json={"cron": cron, "job": JOB}, headers=auth(key)
    )
    assert response.status_code == 400, response.text
    problem = response.json()
    assert problem["code"] == "invalid_cron" and problem["error"]["param"] == "cron"
    assert "never fires" in problem["detail"]
    listed = await api.http.get("/v1/schedules", headers=auth(key))
    assert listed.json()["data"] == []


@pytest.fixture
def settings() -> Settings:
    return Settings(database_url="sqlite:///unused.db", schedules_max_per_tenant=105)


async def test_the_list_pages_past_a_hundred(api: Api) -> None:
    key = await api.key("acme")
    made = []
    for n in range(105):
        created = await api.http.post(
            "/v1/schedules", json={"cron": f"{n % 60} * * * *", "job": JOB}, headers=auth(key)
        )
        assert created.status_code == 201, created.text
        made.append(created.json()["id"])
    seen: list[str] = []
    pages = 0
    after: dict[str, Any] = {"limit": 100}
    while True:
        page = (await api.http.get("/v1/schedules", params=after, headers=auth(key))).json()
        pages += 1
        seen += [s["id"] for s in page["data"]]
        assert page["last_id"] == page["data"][-1]["id"]
        if not page["has_more"]:
            break
        after = {"limit": 100, "after": page["last_id"]}
    assert pages == 2 and seen == made
    first = (await api.http.get("/v1/schedules", headers=auth(key))).json()
    assert len(first["data"]) == 20 and first["has_more"]  # the default page
    unknown = await api.http.get("/v1/schedules", params={"after": "sched_nope"}, headers=auth(key))
    assert unknown.status_code == 404


async def test_a_tenants_schedules_are_capped(api: Api, settings: Settings) -> None:
    key, other = await api.key("acme"), await api.key("other")
    body = {"cron": "0 3 * * *", "job": JOB}
    made = []
    for _ in range(settings.schedules_max_per_tenant):
        made.append((await api.http.post("/v1/schedules", json=body, headers=auth(key))).json())
    refused = await api.http.post("/v1/schedules", json=body, headers=auth(key))
    assert refused.status_code == 403, refused.text
    assert refused.headers["content-type"].startswith("application/problem+json")
    assert refused.json()["limit"] == "schedules_max_per_tenant"
    theirs = await api.http.post("/v1/schedules", json=body, headers=auth(other))
    assert theirs.status_code == 201  # a cap of each tenant's own
    await api.http.delete(f"/v1/schedules/{made[0]['id']}", headers=auth(key))
    again = await api.http.post("/v1/schedules", json=body, headers=auth(key))
    assert again.status_code == 201
