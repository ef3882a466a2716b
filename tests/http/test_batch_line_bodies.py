"""A batch line's body is checked exactly as its HTTP route checks the same request, on both
backends: a body the route refuses (4xx) is that line's error, with its custom_id, and the
batch goes on; a body the route takes becomes the line's job. Never a crash of the batches
role, never a whole batch failed by one line. Hypothesis draws the bodies."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobgate.domain.states import JobState
from tests.api_server import Api

CHAT = "/v1/chat/completions"
RESPONSES = "/v1/responses"


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def nested(depth: int) -> str:
    """A JSON value `depth` objects deep (written by hand: orjson writes at most 254)."""
    return '{"a":' * depth + "1" + "}" * depth


def responses_line(custom_id: str, body_text: str) -> bytes:
    return (
        b'{"custom_id": ' + orjson.dumps(custom_id) + b', "method": "POST", "url": "'
        + RESPONSES.encode() + b'", "body": ' + body_text.encode() + b"}\n"
    )  # fmt: skip


async def run_batch(api: Api, key: str, endpoint: str, content: bytes) -> dict[str, Any]:
    """Upload, create, run the batch to its end; the batch and its lines by custom_id."""
    uploaded = await api.http.post(
        "/v1/files",
        data={"purpose": "batch"},
        files={"file": ("in.jsonl", content)},
        headers=auth(key),
    )
    assert uploaded.status_code == 200, uploaded.text
    created = await api.http.post(
        "/v1/batches",
        json={"input_file_id": uploaded.json()["id"], "endpoint": endpoint,
              "completion_window": "24h"},
        headers=auth(key),
    )  # fmt: skip
    assert created.status_code == 200, created.text
    batch_id = created.json()["id"]
    runner = api.runtime.batch_runner()
    for _ in range(30):
        await runner.batches_once()
        await api.runtime.worker().run_once(limit=100)
        batch = (await api.http.get(f"/v1/batches/{batch_id}", headers=auth(key))).json()
        if batch["status"] in ("completed", "failed"):
            break
    lines: dict[str, dict[str, Any]] = {}
    for name in ("output_file_id", "error_file_id"):
        if batch[name]:
            content_ = await api.http.get(f"/v1/files/{batch[name]}/content", headers=auth(key))
            for raw in content_.content.splitlines():
                entry = orjson.loads(raw)
                lines[entry["custom_id"]] = entry
    return {"batch": batch, "lines": lines}


def refused(entry: dict[str, Any], batch_id: str) -> bool:
    """Whether a line was refused before it became a job (its request id names the batch's
    line, not a job)."""
    response = entry["response"]
    return response is not None and response["request_id"].startswith(f"req_{batch_id}_")


async def test_the_bodies_that_crashed_the_runner_are_each_their_own_error_line(
    api: Api,
) -> None:
    key = await api.key("acme")
    bad = {
        "tools-int": '{"model": "sim-echo", "input": "hi", "tools": 5}',
        "tools-str": '{"model": "sim-echo", "input": "hi", "tools": "abc"}',
        "tools-ints": '{"model": "sim-echo", "input": "hi", "tools": [1]}',
        "text-str": '{"model": "sim-echo", "input": "hi", "text": "abc"}',
        "reasoning-str": '{"model": "sim-echo", "input": "hi", "reasoning": "hi"}',
        "deep-255": f'{{"model": "sim-echo", "input": "hi", "metadata": {nested(255)}}}',
        "deep-1023": f'{{"model": "sim-echo", "input": "hi", "text": {nested(1022)}}}',
    }
    fine = '{"model": "sim-echo", "input": "hi"}'
    content = (
        responses_line("first", fine)
        + b"".join(responses_line(name, text) for name, text in bad.items())
        + responses_line("last", fine)
    )
    ran = await run_batch(api, key, RESPONSES, content)
    batch, lines = ran["batch"], ran["lines"]
    assert batch["status"] == "completed", batch
    assert batch["request_counts"] == {"total": 9, "completed": 2, "failed": 7}
    assert lines["first"]["response"]["status_code"] == 200
    assert lines["last"]["response"]["status_code"] == 200
    for name, text in bad.items():
        entry = lines[name]
        assert refused(entry, batch["id"]) and entry["response"]["status_code"] == 400, name
        assert entry["response"]["body"]["error"]["message"]
        # The route answers the same request alike.
        answer = await api.http.post(
            "/v1/responses",
            content=text[:-1].encode() + b', "background": true}',
            headers={**auth(key), "Content-Type": "application/json"},
        )
        assert answer.status_code == 400, (name, answer.text)


members = st.sampled_from(
    ["tools", "text", "reasoning", "tool_choice", "input", "instructions", "metadata",
     "max_output_tokens", "temperature", "top_p", "truncation", "store", "parallel_tool_calls",
     "user", "include", "prompt_cache_key"]
)  # fmt: skip
leaves = (
    st.none()
    | st.booleans()
    | st.integers(-3, 2**40)
    | st.floats(-3, 3, allow_nan=False)
    | st.text(max_size=8)
)
values = st.recursive(
    leaves,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)
bodies = st.dictionaries(members, values, max_size=3)


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(extras=st.lists(bodies, min_size=1, max_size=3))
async def test_a_line_is_refused_exactly_when_its_route_refuses_it(
    api: Api, extras: list[dict[str, Any]]
) -> None:
    key = await api.key(f"t{len(await api.runtime.storage.tenant_list())}")
    lines = []
    route: dict[str, int] = {}
    for index, extra in enumerate(extras):
        body = {"model": "sim-echo", "input": "hi", **extra}
        custom_id = f"line-{index}"
        lines.append(responses_line(custom_id, orjson.dumps(body).decode()))
        answer = await api.http.post(
            "/v1/responses", json={**body, "background": True}, headers=auth(key)
        )
        assert answer.status_code < 500, (body, answer.text)
        route[custom_id] = answer.status_code
    ran = await run_batch(api, key, RESPONSES, b"".join(lines))
    batch = ran["batch"]
    assert batch["status"] == "completed", batch
    for custom_id, status in route.items():
        entry = ran["lines"][custom_id]
        assert refused(entry, batch["id"]) == (status >= 400), (custom_id, status, entry)
        if status >= 400:
            assert entry["response"]["status_code"] == status


@settings(
    max_examples=15,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    extras=st.lists(
        st.dictionaries(
            st.sampled_from(["messages", "max_tokens", "temperature", "n", "sim", "stop"]),
            values,
            max_size=2,
        ),
        min_size=1,
        max_size=3,
    )
)
async def test_a_chat_line_is_refused_exactly_when_post_v1_jobs_refuses_it(
    api: Api, extras: list[dict[str, Any]]
) -> None:
    key = await api.key(f"t{len(await api.runtime.storage.tenant_list())}")
    lines = []
    route: dict[str, int] = {}
    for index, extra in enumerate(extras):
        body = {"model": "sim-echo", "messages": [{"role": "user", "content": "hi"}], **extra}
        custom_id = f"line-{index}"
        lines.append(
            orjson.dumps({"custom_id": custom_id, "method": "POST", "url": CHAT, "body": body})
            + b"\n"
        )
        answer = await api.http.post(
            "/v1/jobs", json={"endpoint": CHAT, "body": body}, headers=auth(key)
        )
        assert answer.status_code < 500, (body, answer.text)
        route[custom_id] = answer.status_code
        if answer.status_code == 202:  # not left queued for the batch's worker to run
            await api.http.post(f"/v1/jobs/{answer.json()['id']}/cancel", headers=auth(key))
    ran = await run_batch(api, key, CHAT, b"".join(lines))
    batch = ran["batch"]
    assert batch["status"] == "completed", batch
    for custom_id, status in route.items():
        entry = ran["lines"][custom_id]
        assert refused(entry, batch["id"]) == (status >= 400), (custom_id, status, entry)
    jobs = await api.runtime.storage.job_list(
        tenant_id=(await api.runtime.tenants.authenticate(key)).id, limit=50
    )
    assert all(
        job.state in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED) for job in jobs
    )
