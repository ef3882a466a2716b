"""The native job API over real HTTP: the contract of DESIGN section 3."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from jobgate.domain.states import JobState
from jobgate.storage.postgres.store import is_postgres, postgres_store
from jobgate.testing import Block, ScriptedProvider, eventually
from tests.api_server import Api

CHAT = "/v1/chat/completions"


def job_body(text: str = "hello", **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "sim-echo", "messages": [{"role": "user", "content": text}]}
    body.update(extra)
    return {"endpoint": CHAT, "body": body}


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def test_submit_answers_202_with_location(api: Api) -> None:
    key = await api.key("acme")
    response = await api.http.post("/v1/jobs", json=job_body(), headers=auth(key))
    assert response.status_code == 202
    job = response.json()
    assert job["object"] == "job" and job["status"] == "queued" and job["id"].startswith("job_")
    assert response.headers["location"] == f"/v1/jobs/{job['id']}"
    assert int(response.headers["retry-after"]) >= 1
    assert job["provider"] == "sim" and job["model"] == "sim-echo" and job["attempt"] == 0
    got = await api.http.get(f"/v1/jobs/{job['id']}", headers=auth(key))
    assert got.status_code == 200 and got.json()["id"] == job["id"]


async def test_prefer_wait_answers_200_when_done_in_time(api: Api) -> None:
    key = await api.key("acme")
    worker = asyncio.create_task(api.runtime.worker().run())
    try:
        response = await api.http.post(
            "/v1/jobs", json=job_body("hi"), headers={**auth(key), "Prefer": "wait=10"}
        )
    finally:
        worker.cancel()
    assert response.status_code == 200
    assert response.headers["preference-applied"] == "wait=10"
    job = response.json()
    assert job["status"] == "succeeded" and "retry-after" not in response.headers
    assert job["result"]["choices"][0]["message"]["content"] == "echo: hi"
    assert job["usage"]["input_tokens"] >= 1


async def _polling(api: Api, job_id: str, key: str) -> asyncio.Task[httpx.Response]:
    """A long poll of `job_id` that only the job's change can answer before a minute: the
    safety-net re-read is pushed past the wait. Returned once the poll waits on the change
    (its first read done), so a change made next is one it has to be woken for."""
    api.runtime.jobs.poll_fallback_s = 3600
    changes = api.runtime.storage.changes
    before = changes.job_watch_count
    poll = asyncio.create_task(
        api.http.get(f"/v1/jobs/{job_id}", params={"wait": 60}, headers=auth(key), timeout=90)
    )
    async with asyncio.timeout(30):
        while changes.job_watch_count == before:  # noqa: ASYNC110 (the server's own tasks)
            await asyncio.sleep(0.01)
    assert not poll.done()
    return poll


async def test_long_poll_wakes_on_the_transition(api: Api) -> None:
    key = await api.key("acme")
    job = (await api.http.post("/v1/jobs", json=job_body(), headers=auth(key))).json()
    poll = await _polling(api, job["id"], key)
    await api.http.post(f"/v1/jobs/{job['id']}/cancel", headers=auth(key))
    # Answered well before its minute, with no re-read due: woken by the change itself.
    response = await asyncio.wait_for(poll, 30)
    assert response.json()["status"] == "cancelled"


@pytest.mark.parametrize(
    "backend", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
async def test_long_poll_wakes_on_a_change_made_by_another_process(api: Api) -> None:
    """Cross-process wake-ups: PostgreSQL's LISTEN/NOTIFY."""
    key = await api.key("acme")
    job = (await api.http.post("/v1/jobs", json=job_body(), headers=auth(key))).json()
    tenant = await api.runtime.tenants.authenticate(key)
    poll = await _polling(api, job["id"], key)
    storage = api.runtime.storage
    assert is_postgres(storage)
    other = postgres_store(storage.engine.dsn, pool_size=1)  # its own hub: only NOTIFY links them
    await other.open()
    try:
        await other.job_cancel(job_id=job["id"], tenant_id=tenant.id, actor="other-process")
        response = await asyncio.wait_for(poll, 30)  # before its minute: woken by NOTIFY
    finally:
        await other.close()
    assert response.json()["status"] == "cancelled"


async def test_status_reads_and_long_polls_leave_the_prompt_in_the_database(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A status read, a long poll, `Prefer: wait`, the event log and a page after a job read
    the job's view (storage.job_view), never the whole job with its prompt; the answers are
    the same."""
    key = await api.key("acme")
    body = job_body("a long prompt " * 5_000, stream=True, max_tokens=50)
    job = (await api.http.post("/v1/jobs", json=body, headers=auth(key))).json()
    storage = api.runtime.storage
    whole_reads: list[dict[str, Any]] = []
    read_whole = storage.job_get

    async def counted(**kwargs: Any) -> Any:
        whole_reads.append(kwargs)
        return await read_whole(**kwargs)

    monkeypatch.setattr(storage, "job_get", counted)
    path = f"/v1/jobs/{job['id']}"
    read = await api.http.get(path, headers=auth(key))
    polled = await api.http.get(path, params={"wait": 0.2}, headers=auth(key))
    waited = await api.http.post(
        "/v1/jobs", json=job_body("x"), headers={**auth(key), "Prefer": "wait=1"}
    )
    events = await api.http.get(f"{path}/events", headers=auth(key))
    page = await api.http.get("/v1/jobs", params={"after": job["id"]}, headers=auth(key))
    answers = (read, polled, waited, events, page)
    assert [a.status_code for a in answers] == [200, 200, 202, 200, 200]
    assert whole_reads == []
    added_by_reads = {"queue_position", "queue_position_exact", "waiting", "note"}  # job_notes
    for answer in (read.json(), polled.json()):
        assert {k: v for k, v in answer.items() if k not in added_by_reads} == {
            k: v for k, v in job.items() if k not in added_by_reads
        }


async def test_a_queued_jobs_status_read_is_one_storage_read(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plain status read of a queued job reads the job and its place in its tenant's line
    together (Storage.job_status): no second read for `queue_position`, the same answer."""
    key = await api.key("acme")
    first = (await api.http.post("/v1/jobs", json=job_body(), headers=auth(key))).json()
    second = (await api.http.post("/v1/jobs", json=job_body(), headers=auth(key))).json()
    storage = api.runtime.storage
    separate: list[str] = []
    read_position = storage.job_queue_position

    async def counted(**kwargs: Any) -> Any:
        separate.append(kwargs["job"].id)
        return await read_position(**kwargs)

    monkeypatch.setattr(storage, "job_queue_position", counted)
    read = [
        (await api.http.get(f"/v1/jobs/{job['id']}", headers=auth(key))).json()
        for job in (first, second)
    ]
    assert [answer["queue_position"] for answer in read] == [1, 2]
    assert separate == []
    # A long poll that times out on a queued job still says where it stands.
    polled = await api.http.get(f"/v1/jobs/{second['id']}", params={"wait": 0.1}, headers=auth(key))
    assert polled.json()["queue_position"] == 2


async def test_long_poll_times_out_with_the_current_state(api: Api) -> None:
    key = await api.key("acme")
    job = (await api.http.post("/v1/jobs", json=job_body(), headers=auth(key))).json()
    response = await api.http.get(f"/v1/jobs/{job['id']}", params={"wait": 0.2}, headers=auth(key))
    assert response.status_code == 200 and response.json()["status"] == "queued"
    too_long = await api.http.get(f"/v1/jobs/{job['id']}", params={"wait": 61}, headers=auth(key))
    assert too_long.status_code == 400 and too_long.json()["error"]["param"] == "query.wait"


async def test_cancel_is_idempotent_and_never_409(api: Api, scripted: ScriptedProvider) -> None:
    key = await api.key("acme")
    job = (await api.http.post("/v1/jobs", json=job_body(), headers=auth(key))).json()
    first = await api.http.post(f"/v1/jobs/{job['id']}/cancel", headers=auth(key))
    second = await api.http.post(f"/v1/jobs/{job['id']}/cancel", headers=auth(key))
    assert first.status_code == second.status_code == 200
    assert first.json()["status"] == second.json()["status"] == "cancelled"
    assert first.json()["cancel_outcome"] == "not_started"

    block = Block()
    scripted.script.append(block)
    running = (
        await api.http.post(
            "/v1/jobs", json={**job_body(), "provider": "scripted"}, headers=auth(key)
        )
    ).json()
    worker = api.runtime.worker()
    with api.runtime.storage.changes.on_cancel(worker.on_cancel_requested):
        work = asyncio.create_task(worker.run_once())
        await asyncio.wait_for(block.started.wait(), 5)
        asked = await api.http.post(f"/v1/jobs/{running['id']}/cancel", headers=auth(key))
        assert asked.status_code == 200 and asked.json()["status"] == "running"
        assert asked.json()["cancel_requested_at"] is not None
        await asyncio.wait_for(work, 5)
    final = await api.http.get(f"/v1/jobs/{running['id']}", headers=auth(key))
    assert final.json()["status"] == "cancelled"
    again = await api.http.post(f"/v1/jobs/{running['id']}/cancel", headers=auth(key))
    assert again.status_code == 200 and again.json()["status"] == "cancelled"


async def test_events_json_and_sse_with_resume(api: Api) -> None:
    key = await api.key("acme")
    job = (await api.http.post("/v1/jobs", json=job_body(), headers=auth(key))).json()
    events = (await api.http.get(f"/v1/jobs/{job['id']}/events", headers=auth(key))).json()
    assert [(e["seq"], e["from"], e["to"]) for e in events["data"]] == [(1, None, "queued")]
    received: list[str] = []

    async def read_stream(last_event_id: str | None) -> None:
        headers = {**auth(key), "Accept": "text/event-stream"}
        if last_event_id:
            headers["Last-Event-ID"] = last_event_id
        async with api.http.stream(
            "GET", f"/v1/jobs/{job['id']}/events", headers=headers
        ) as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            async for line in stream.aiter_lines():
                if line.startswith("id: "):
                    received.append(line[4:])

    reader = asyncio.create_task(read_stream(None))
    await asyncio.sleep(0.3)
    worker = api.runtime.worker()
    await worker.run_once()
    await asyncio.wait_for(reader, 10)  # the stream ends after the terminal event
    assert received == ["1", "2", "3"]
    received.clear()
    await asyncio.wait_for(read_stream("2"), 10)
    assert received == ["3"]


async def test_list_filters_and_pages(api: Api) -> None:
    key = await api.key("acme")
    ids = []
    for i in range(5):
        ids.append(
            (await api.http.post("/v1/jobs", json=job_body(str(i)), headers=auth(key))).json()["id"]
        )
    await api.http.post(f"/v1/jobs/{ids[0]}/cancel", headers=auth(key))
    page = (await api.http.get("/v1/jobs", params={"limit": 2}, headers=auth(key))).json()
    assert page["object"] == "list" and page["has_more"] and len(page["data"]) == 2
    rest = (
        await api.http.get(
            "/v1/jobs", params={"limit": 10, "after": page["last_id"]}, headers=auth(key)
        )
    ).json()
    assert not rest["has_more"]
    assert {j["id"] for j in page["data"] + rest["data"]} == set(ids)
    cancelled = (
        await api.http.get("/v1/jobs", params={"status": "cancelled"}, headers=auth(key))
    ).json()
    assert [j["id"] for j in cancelled["data"]] == [ids[0]]
    bad = await api.http.get("/v1/jobs", params={"status": "nope"}, headers=auth(key))
    assert bad.status_code == 400


async def test_delete_cancels_then_purges(api: Api) -> None:
    key = await api.key("acme")
    job = (await api.http.post("/v1/jobs", json=job_body(), headers=auth(key))).json()
    deleted = await api.http.delete(f"/v1/jobs/{job['id']}", headers=auth(key))
    assert deleted.status_code == 200
    assert deleted.json()["status"] == "cancelled" and deleted.json()["purged"] is True
    stored = await api.runtime.storage.job_get(job_id=job["id"])
    assert stored is not None and stored.request is None


async def test_retry_only_redrives_dead_letters(api: Api) -> None:
    key = await api.key("acme")
    failing = job_body(sim={"fail_with": "server_error"})
    job = (
        await api.http.post("/v1/jobs", json={**failing, "max_attempts": 1}, headers=auth(key))
    ).json()
    premature = await api.http.post(f"/v1/jobs/{job['id']}/retry", headers=auth(key))
    assert premature.status_code == 409
    assert premature.json()["code"] == "job_not_dead_lettered"
    await api.runtime.worker().run_once()
    dead = (
        await api.http.get("/v1/jobs", params={"dead_lettered": "true"}, headers=auth(key))
    ).json()
    assert [j["id"] for j in dead["data"]] == [job["id"]]
    redriven = await api.http.post(f"/v1/jobs/{job['id']}/retry", headers=auth(key))
    assert redriven.status_code == 202 and redriven.json()["status"] == "queued"


# -- idempotency -----------------------------------------------------------------------------


async def test_idempotency_key_semantics(api: Api) -> None:
    acme, beta = await api.key("acme"), await api.key("beta")
    headers = {**auth(acme), "Idempotency-Key": "op_42"}
    first = await api.http.post("/v1/jobs", json=job_body(), headers=headers)
    replay = await api.http.post("/v1/jobs", json=job_body(), headers=headers)
    assert first.status_code == replay.status_code == 202
    assert replay.json()["id"] == first.json()["id"]
    assert replay.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in first.headers
    reused = await api.http.post("/v1/jobs", json=job_body("other"), headers=headers)
    assert reused.status_code == 422
    assert reused.json()["error"]["code"] == "idempotency_key_reused"
    theirs = await api.http.post(
        "/v1/jobs", json=job_body(), headers={**auth(beta), "Idempotency-Key": "op_42"}
    )
    assert theirs.status_code == 202 and theirs.json()["id"] != first.json()["id"]
    invalid = await api.http.post(
        "/v1/jobs", json=job_body(), headers={**auth(acme), "Idempotency-Key": "x" * 256}
    )
    assert invalid.status_code == 400
    assert invalid.json()["code"] == "invalid_idempotency_key"


async def test_fifty_concurrent_submits_with_one_key_make_one_job(api: Api) -> None:
    key = await api.key("acme")
    headers = {**auth(key), "Idempotency-Key": "burst"}
    responses = await asyncio.gather(
        *(api.http.post("/v1/jobs", json=job_body(), headers=headers) for _ in range(50))
    )
    assert {r.status_code for r in responses} <= {202, 409}
    accepted = {r.json()["id"] for r in responses if r.status_code == 202}
    assert len(accepted) == 1
    listed = (await api.http.get("/v1/jobs", params={"limit": 100}, headers=auth(key))).json()
    assert [j["id"] for j in listed["data"]] == list(accepted)


# -- isolation and bad input ------------------------------------------------------------------


async def test_another_tenants_job_is_404_on_every_route(api: Api) -> None:
    acme, beta = await api.key("acme"), await api.key("beta")
    job = (await api.http.post("/v1/jobs", json=job_body(), headers=auth(acme))).json()
    path = f"/v1/jobs/{job['id']}"
    missing = f"/v1/jobs/job_{'0' * 26}"
    for target in (path, missing):
        answers = [
            await api.http.get(target, headers=auth(beta)),
            await api.http.get(target, params={"wait": 0.1}, headers=auth(beta)),
            await api.http.get(f"{target}/events", headers=auth(beta)),
            await api.http.get(
                f"{target}/events", headers={**auth(beta), "Accept": "text/event-stream"}
            ),
            await api.http.post(f"{target}/cancel", headers=auth(beta)),
            await api.http.post(f"{target}/retry", headers=auth(beta)),
            await api.http.delete(target, headers=auth(beta)),
        ]
        assert [a.status_code for a in answers] == [404] * len(answers)
        assert {a.json()["code"] for a in answers} == {"not_found"}
    listed = (await api.http.get("/v1/jobs", headers=auth(beta))).json()
    assert listed["data"] == []
    untouched = (await api.http.get(path, headers=auth(acme))).json()
    assert untouched["status"] == "queued" and not untouched["purged"]


@pytest.mark.parametrize("header", [None, "Bearer", "Bearer jg_wrong", "Basic abc"])
async def test_missing_or_wrong_key_is_401(api: Api, header: str | None) -> None:
    headers = {} if header is None else {"Authorization": header}
    for method, path in (
        ("POST", "/v1/jobs"),
        ("GET", "/v1/jobs"),
        ("GET", "/v1/jobs/job_x"),
        ("POST", "/v1/jobs/job_x/cancel"),
    ):
        response = await api.http.request(method, path, json=job_body(), headers=headers)
        assert response.status_code == 401, (method, path)
        assert response.headers["content-type"] == "application/problem+json"
        assert response.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize(
    ("payload", "status", "code", "param"),
    [
        (b"{not json", 400, "invalid_json", None),
        (b"[]", 400, "invalid_request", None),
        (b'{"body": {}}', 400, "invalid_request", "endpoint"),
        (b'{"endpoint": "/v1/chat/completions"}', 400, "invalid_request", "body"),
        (
            b'{"endpoint": "/v1/chat/completions", "body": {}, "provider": "nope"}',
            400,
            "unknown_provider",
            "provider",
        ),
        (
            b'{"endpoint": "/v1/embeddings", "body": {"model": "sim-echo"}}',
            400,
            "unsupported_endpoint",
            "endpoint",
        ),
        (
            b'{"endpoint": "/v1/chat/completions", "body": {"model": "sim-echo"}}',
            400,
            "invalid_request",
            "body.messages",
        ),
        (
            b'{"endpoint": "/v1/chat/completions", "body": {}, "priority": 12}',
            400,
            "invalid_request",
            "priority",
        ),
        (
            b'{"endpoint": "/v1/chat/completions", "body": {}, "surprise": 1}',
            400,
            "invalid_request",
            "surprise",
        ),
        (
            b'{"endpoint": "/v1/chat/completions", "body": {"model": "sim-echo", "messages":'
            b' [{"role": "user", "content": "x"}], "sim": {"fail_with": "meteor"}}}',
            400,
            "invalid_request",
            "body.sim.fail_with",
        ),
        (
            b'{"endpoint": "/v1/chat/completions", "body": {"model": "sim-echo", "messages":'
            b' [{"role": "user", "content": "x"}]}, "webhook": {"url": "ftp://x"}}',
            400,
            "invalid_webhook_url",
            "webhook.url",
        ),
    ],
)
async def test_bad_input_is_a_clear_400_and_stores_nothing(
    api: Api, payload: bytes, status: int, code: str, param: str | None
) -> None:
    key = await api.key("acme")
    accepted = (await api.http.post("/v1/jobs", json=job_body(), headers=auth(key))).json()
    response = await api.http.post(
        "/v1/jobs",
        content=payload,
        headers={**auth(key), "Content-Type": "application/json", "Idempotency-Key": "bad-input"},
    )
    assert response.status_code == status, response.text
    problem = response.json()
    assert response.headers["content-type"] == "application/problem+json"
    assert problem["code"] == code and problem["status"] == status and problem["detail"]
    assert problem["error"]["param"] == param
    assert problem["type"] == f"/problems/{code}"
    listed = (await api.http.get("/v1/jobs", headers=auth(key))).json()
    assert [j["id"] for j in listed["data"]] == [accepted["id"]]  # nothing new, nothing lost
    # The key was not burnt by the invalid request.
    ok = await api.http.post(
        "/v1/jobs", json=job_body(), headers={**auth(key), "Idempotency-Key": "bad-input"}
    )
    assert ok.status_code == 202


async def raw_request(api: Api, head: bytes, body_parts: list[bytes]) -> bytes:
    """Send a request by hand (httpx cannot stop sending when the server answers early)."""
    host, port = api.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(head)
    try:
        for part in body_parts:
            writer.write(part)
            await writer.drain()
    except ConnectionError:
        pass  # the server answered and closed: read what it said
    answer = await asyncio.wait_for(reader.read(65536), 10)
    writer.close()
    return answer


async def test_oversized_bodies_get_413_without_being_read(api: Api) -> None:
    key = await api.key("acme")
    limit = api.runtime.settings.max_body_bytes
    common = (
        f"POST /v1/jobs HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {key}\r\n"
        "Content-Type: application/json\r\n"
    )
    # Declared too large: answered from the headers alone, before any body byte is sent.
    declared = await raw_request(
        api, (common + f"Content-Length: {limit + 1}\r\n\r\n").encode(), []
    )
    assert declared.startswith(b"HTTP/1.1 413"), declared[:80]
    assert b"payload_too_large" in declared
    # Chunked: read only until the limit is passed.
    chunk = b"x" * 65536
    framed = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
    chunked = await raw_request(
        api,
        (common + "Transfer-Encoding: chunked\r\n\r\n").encode(),
        [framed] * (limit // len(chunk) + 2),
    )
    assert chunked.startswith(b"HTTP/1.1 413"), chunked[:80]
    assert (await api.http.get("/v1/jobs", headers=auth(key))).json()["data"] == []


async def test_storage_unreachable_is_503_with_retry_after(api: Api) -> None:
    key = await api.key("acme")
    await api.runtime.tenants.authenticate(key)  # cached: the failure below is the storage's
    await api.runtime.storage.close()
    response = await api.http.get("/v1/jobs", headers=auth(key))
    assert response.status_code == 503
    assert int(response.headers["retry-after"]) >= 1
    assert response.json()["code"] == "storage_unavailable"
    ready = await api.http.get("/readyz")
    assert ready.status_code == 503
    await api.runtime.storage.open()
    assert (await api.http.get("/readyz")).status_code == 200


async def test_operations_routes(api: Api) -> None:
    assert (await api.http.get("/healthz")).json() == {"status": "ok"}
    ready = (await api.http.get("/readyz")).json()
    assert ready["status"] == "ready" and ready["storage"] == api.runtime.storage.dialect
    spec = (await api.http.get("/openapi.json")).json()
    assert {"/v1/jobs", "/v1/jobs/{job_id}", "/v1/jobs/{job_id}/cancel"} <= set(spec["paths"])
    assert (await api.http.get("/docs")).status_code == 200
    unknown = await api.http.get("/v1/nothing-here")
    assert unknown.status_code == 404 and unknown.json()["code"] == "not_found"


async def test_job_states_in_views(api: Api) -> None:
    assert {s.value for s in JobState} == {
        "queued",
        "running",
        "succeeded",
        "failed",
        "cancelled",
        "expired",
    }
    assert isinstance(api.http, httpx.AsyncClient)


# -- limits ----------------------------------------------------------------------------------


async def test_limits_answer_403_and_429_naming_the_limit(api: Api) -> None:
    from jobgate.storage.records import LimitOverrides

    key = await api.key("acme")
    tenant = await api.runtime.tenants.authenticate(key)
    await api.runtime.storage.tenant_limits_set(
        tenant_id=tenant.id, overrides=LimitOverrides(allowed_models=("sim-echo",), max_queued=1)
    )
    api.runtime.limits.invalidate()
    refused = await api.http.post(
        "/v1/jobs",
        json={
            "endpoint": CHAT,
            "body": {"model": "sim-other", "messages": [{"role": "user", "content": "x"}]},
        },
        headers=auth(key),
    )
    assert refused.status_code == 403
    assert refused.json()["code"] == "limit_exceeded"
    assert refused.json()["limit"] == "allowed_models"
    assert (await api.http.post("/v1/jobs", json=job_body(), headers=auth(key))).status_code == 202
    api.runtime.limits.invalidate()
    full = await api.http.post("/v1/jobs", json=job_body("more"), headers=auth(key))
    assert full.status_code == 429
    assert full.json()["code"] == "queue_full" and full.json()["limit"] == "max_queued"
    assert 1 <= int(full.headers["retry-after"]) <= 120
    listed = (await api.http.get("/v1/jobs", headers=auth(key))).json()
    assert len(listed["data"]) == 1


async def test_a_long_poll_whose_client_leaves_stops_waiting(api: Api) -> None:
    key = await api.key("acme")
    job = (await api.http.post("/v1/jobs", json=job_body(), headers=auth(key))).json()
    changes = api.runtime.storage.changes
    host, port = api.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        f"GET /v1/jobs/{job['id']}?wait=30 HTTP/1.1\r\nHost: t\r\n"
        f"Authorization: Bearer {key}\r\n\r\n".encode()
    )
    await writer.drain()
    await eventually(lambda: changes.job_watch_count > 0, what="the poll parked")
    assert changes.job_watch_count == 1  # parked
    writer.close()  # the client goes away
    # The wait ends with the connection, not at 30 s (the deadline is shorter than that).
    await eventually(lambda: changes.job_watch_count == 0, timeout_s=25, what="the wait ended")
    del reader


async def test_retry_of_a_purged_dead_letter_is_refused(api: Api) -> None:
    key = await api.key("acme")
    failing = job_body(sim={"fail_with": "server_error"})
    job = (
        await api.http.post("/v1/jobs", json={**failing, "max_attempts": 1}, headers=auth(key))
    ).json()
    await api.runtime.worker().run_once()
    assert (await api.http.delete(f"/v1/jobs/{job['id']}", headers=auth(key))).status_code == 200
    refused = await api.http.post(f"/v1/jobs/{job['id']}/retry", headers=auth(key))
    assert refused.status_code == 409
    assert refused.headers["content-type"].startswith("application/problem+json")
    assert refused.json()["code"] == "job_purged"
    assert refused.json()["error"]["code"] == "job_purged"
    stored = await api.runtime.storage.job_get(job_id=job["id"])
    assert stored is not None and stored.state is JobState.FAILED and stored.request is None
