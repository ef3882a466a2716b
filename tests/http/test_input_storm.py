"""A property test: generated JSON thrown at every write route of a real server (and the
dashboard's sign-in form), on both backends. Extreme numbers, non-finite floats, integers
beyond 64 bits, lone surrogates, NUL, deep nesting, huge strings and unknown fields, raw or
inside otherwise valid requests: jobs, bulk submits and actions, responses (top-level and
nested members), webhook endpoints, schedules (their cron and job template), operator pauses,
inbound provider webhooks, ids in the paths of every write route, file uploads (form fields,
filenames and JSONL lines), and batches made from generated lines, which the batches role
then validates and expands (line bodies included). Never a 5xx, no pass of the batches role
fails, and a job accepted before the storm reads the same after it (but its place in line).

JOBGATE_STORM_EXAMPLES sets the number of examples (1-3 requests each) per backend; CI keeps
it modest.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.api_server import Api

EXAMPLES = int(os.environ.get("JOBGATE_STORM_EXAMPLES", "120"))


class Raw:
    """A JSON token written as is (NaN, 1e999, a lone surrogate escape...)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"Raw({self.text!r})"


class Huge:
    """A string of `size` characters (short to print when hypothesis reports an example)."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __repr__(self) -> str:
        return f"Huge({self.size})"


def dump(value: Any) -> str:
    """JSON text of `value`, with Raw tokens written verbatim, in keys as well."""
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, Huge):
        return '"' + "x" * value.size + '"'
    if isinstance(value, dict):
        items = (
            f"{k.text if isinstance(k, Raw) else json.dumps(k)}: {dump(v)}"
            for k, v in value.items()
        )
        return "{" + ", ".join(items) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(dump(v) for v in value) + "]"
    return json.dumps(value)


NASTY_TOKENS = [
    "NaN", "Infinity", "-Infinity", "1e999", "-1e999", "1e300", "3e11", "-0.0", "1e-400",
    "18446744073709551616", "9223372036854775808", "-9223372036854775809",
    "123456789012345678901234567890", '"\\ud800"', '"\\udfff x"', '"a\\u0000b"', '"\\u0000"',
]  # fmt: skip
numbers = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(NASTY_TOKENS).map(Raw),
)
strings = st.one_of(
    st.text(max_size=20),
    st.sampled_from(["sim-echo", "gpt-4o", "claude-3-5-sonnet", "/v1/chat/completions"]),
    st.integers(min_value=1, max_value=2_000_000).map(Huge),  # up to 2 MB: past the body limit
)
leaves = st.one_of(st.none(), st.booleans(), numbers, strings)
keys = st.one_of(st.text(max_size=10), st.sampled_from(['"\\ud800"', '"k\\u0000"']).map(Raw))
documents = st.recursive(
    leaves,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)),
    max_leaves=12,
)
deep = st.integers(min_value=50, max_value=600).map(lambda n: Raw("[" * n + "]" * n))
values = st.one_of(documents, deep)


def _submit(**overrides: Any) -> dict[str, Any]:
    return {
        "endpoint": "/v1/chat/completions",
        "body": {"model": "sim-echo", "messages": [{"role": "user", "content": "hi"}]},
        **overrides,
    }


SUBMIT_FIELDS = [
    "priority", "max_attempts", "start_timeout_s", "execution_timeout_s", "metadata",
    "webhook", "provider", "endpoint", "body", "unknown_field",
]  # fmt: skip
BODY_FIELDS = ["model", "messages", "sim", "temperature", "seed", "extra"]
SIM_FIELDS = ["latency_s", "fail_times", "retry_after_s", "fail_with", "chunks"]
RESPONSE_FIELDS = [
    "model",
    "input",
    "metadata",
    "max_output_tokens",
    "temperature",
    "top_p",
    "tools",
    "instructions",
    "sim",
    "webhook",
    "unknown_field",
]  # fmt: skip  (never `background` or `stream`: a synchronous create would wait for a worker)


# Nested members of a /v1/responses create (the schemas the Responses API documents).
RESPONSE_PATHS: list[tuple[str | int, ...]] = [
    ("reasoning", "effort"), ("reasoning", "summary"), ("text", "verbosity"),
    ("text", "format"), ("text", "format", "type"), ("text", "format", "schema"),
    ("tool_choice",), ("tool_choice", "type"), ("tool_choice", "name"), ("tools", 0),
    ("tools", 0, "type"), ("tools", 0, "parameters"), ("input", 0), ("input", 0, "role"),
    ("input", 0, "content"), ("input", 0, "content", 0, "type"), ("input", 0, "type"),
    ("metadata", "k"), ("include",), ("previous_response_id",), ("conversation",),
    ("truncation",), ("store",), ("prompt",), ("max_tool_calls",), ("top_logprobs",),
]  # fmt: skip
SCHEDULE_FIELDS = ["cron", "job", "paused", "unknown_field"]
CRONS = [
    "0 0 30 2 *", "0 0 31 4 *", "* * 30,31 2 *", "*/0 * * * *", "L * * * *", "0 0 L 2 *",
    "0 0 * * 7#5", "1-0 * * * *", "0-59/61 * * * *", "? * * * *", "0 0 1W * *", "* * * *",
    "* * * * * *", "60 * * * *", "@yearly", "0 0 29 2 1", "*/15 * * * *", "\u0000 * * * *",
]  # fmt: skip
# Write routes that take an id in their path; {} is replaced by a generated segment.
ID_ROUTES = [
    ("POST", "/v1/jobs/{}/cancel"), ("DELETE", "/v1/jobs/{}"), ("POST", "/v1/jobs/{}/retry"),
    ("POST", "/v1/responses/{}/cancel"), ("DELETE", "/v1/responses/{}"),
    ("DELETE", "/v1/files/{}"), ("POST", "/v1/batches/{}/cancel"),
    ("POST", "/v1/schedules/{}/pause"), ("POST", "/v1/schedules/{}/resume"),
    ("DELETE", "/v1/schedules/{}"), ("DELETE", "/v1/webhook_endpoints/{}"),
    ("POST", "/v1/webhook_endpoints/{}/rotate_secret"), ("DELETE", "/v1/conversations/{}"),
    ("POST", "/v1/conversations/{}/items"),
]  # fmt: skip
LINE_URLS = ["/v1/chat/completions", "/v1/responses"]
BATCH_STATUSES = {"validating", "in_progress", "finalizing", "completed", "failed", "cancelling",
                  "cancelled"}  # fmt: skip
JSON = "application/json"
BOUNDARY = "storm-boundary-7f3a"
FORM = f"multipart/form-data; boundary={BOUNDARY}"


@dataclasses.dataclass(frozen=True)
class Send:
    """One request: its body as text (surrogates kept) and its content type."""

    method: str
    path: str
    body: str
    content_type: str = JSON
    operator: bool = False  # sent with an operator's key (the operator routes)


@dataclasses.dataclass(frozen=True)
class Batch:
    """An upload of generated JSONL lines, then (if stored) a batch of them and passes of the
    batches role, which validate each line's body as its route would."""

    endpoint: str
    lines: str


def _set(body: dict[str, Any], path: tuple[str | int, ...], value: Any) -> None:
    """Set `value` at `path`, making the containers on the way."""
    node: Any = body
    for step, after in itertools.pairwise(path):
        wanted: type = list if isinstance(after, int) else dict
        child: Any = node[step] if isinstance(step, int) else node.get(step)
        if not isinstance(child, wanted) or (wanted is list and not child):
            child = [{}] if wanted is list else {}
            node[step] = child
        node = child
    node[path[-1]] = value


def _form(fields: list[tuple[str, str | None, str]]) -> str:
    """A multipart form: (name, filename or None, content), each content as text."""
    parts = []
    for name, filename, content in fields:
        disposition = f'form-data; name="{name}"'
        if filename is not None:
            disposition += f'; filename="{filename}"'
        parts.append(f"--{BOUNDARY}\r\nContent-Disposition: {disposition}\r\n\r\n{content}\r\n")
    return "".join(parts) + f"--{BOUNDARY}--\r\n"


@st.composite
def lines(draw: st.DrawFn, url: str) -> str:
    """1-3 JSONL batch lines of requests to `url`, one member of one of them generated."""
    made = []
    for n in range(draw(st.integers(min_value=1, max_value=3))):
        body: dict[str, Any] = (
            {"model": "sim-echo", "messages": [{"role": "user", "content": "hi"}]}
            if url == "/v1/chat/completions"
            else {"model": "sim-echo", "input": "hi"}
        )
        line: dict[str, Any] = {"custom_id": f"c{n}", "method": "POST", "url": url, "body": body}
        where = draw(st.sampled_from(["body", "nested", "line", "raw", "none"]))
        if where == "body":
            fields = BODY_FIELDS if url == "/v1/chat/completions" else RESPONSE_FIELDS
            body[draw(st.sampled_from(fields))] = draw(values)
        elif where == "nested" and url == "/v1/responses":
            _set(body, draw(st.sampled_from(RESPONSE_PATHS)), draw(values))
        elif where == "line":
            line[draw(st.sampled_from(["custom_id", "method", "url", "body", "x"]))] = draw(values)
        made.append(dump(draw(values)) if where == "raw" else dump(line))
    return "\n".join(made) + "\n"


@st.composite
def requests(draw: st.DrawFn) -> Send | Batch:  # noqa: C901 -- a branch per kind of request
    """One request of the storm (or a batch made from generated lines)."""
    kinds = ["job", "job_body", "job_sim", "response", "endpoint", "form", "raw", "bulk", "batch"]
    kinds += ["bulk_action", "response_nested", "schedule", "schedule_job", "id_path", "file"]
    kinds += ["batch_lines", "pause", "provider_webhook"]
    kind = draw(st.sampled_from(kinds))
    value = draw(values)
    if kind == "response_nested":
        nested: dict[str, Any] = {"model": "sim-echo", "input": "hi", "background": True}
        _set(nested, draw(st.sampled_from(RESPONSE_PATHS)), value)
        return Send("POST", "/v1/responses", dump(nested))
    if kind == "schedule":
        field = draw(st.sampled_from(SCHEDULE_FIELDS))
        cron: Any = (
            draw(st.sampled_from(CRONS)) if field == "cron" and draw(st.booleans()) else value
        )
        schedule = {"cron": "0 3 * * *", "job": _submit(), field: cron}
        return Send("POST", "/v1/schedules", dump(schedule))
    if kind == "schedule_job":
        job = _submit(**{draw(st.sampled_from(SUBMIT_FIELDS)): value})
        return Send("POST", "/v1/schedules", dump({"cron": "*/5 * * * *", "job": job}))
    if kind == "id_path":
        method, template = draw(st.sampled_from(ID_ROUTES))
        segment = draw(st.text(min_size=1, max_size=300))
        quoted = "".join(
            c if c.isalnum() and c.isascii() else f"%{ord(c) & 0xFF:02X}" for c in segment
        )
        return Send(method, template.format(quoted), dump(value))
    if kind == "file":
        purpose = draw(st.one_of(st.just("batch"), st.text(max_size=20)))
        filename = draw(st.one_of(st.just("storm.jsonl"), st.text(max_size=40)))
        content = draw(lines(draw(st.sampled_from(LINE_URLS))))
        parts = [("purpose", None, purpose), ("file", filename, content)]
        if draw(st.booleans()):
            parts.reverse()  # the purpose after the file
        return Send("POST", "/v1/files", _form(parts), FORM)
    if kind == "pause":  # an operator's; each one made is lifted at once (see _send)
        field = draw(st.sampled_from(["provider", "model", "tenant", "reason", "x"]))
        pause = {"provider": "sim", "model": "sim-nothing-runs-this", field: value}
        return Send("POST", "/v1/pauses", dump(pause), operator=True)
    if kind == "provider_webhook":  # unsigned or badly signed: refused, never a 5xx
        provider = draw(st.sampled_from(["sim", "openai", "anthropic", "nope", "a%00b"]))
        return Send("POST", f"/v1/provider_webhooks/{provider}", dump(value))
    if kind == "batch_lines":
        url = draw(st.sampled_from(LINE_URLS))
        return Batch(url, draw(lines(url)))
    if kind == "job":
        return Send(
            "POST", "/v1/jobs", dump(_submit(**{draw(st.sampled_from(SUBMIT_FIELDS)): value}))
        )
    if kind == "job_body":
        job = _submit()
        job["body"][draw(st.sampled_from(BODY_FIELDS))] = value
        return Send("POST", "/v1/jobs", dump(job))
    if kind == "job_sim":
        job = _submit()
        job["body"]["sim"] = {draw(st.sampled_from(SIM_FIELDS)): value}
        return Send("POST", "/v1/jobs", dump(job))
    if kind == "response":
        body: dict[str, Any] = {"model": "sim-echo", "input": "hi", "background": True}
        body[draw(st.sampled_from(RESPONSE_FIELDS))] = value
        return Send("POST", "/v1/responses", dump(body))
    if kind == "endpoint":
        field = draw(st.sampled_from(["description", "event_types", "include_result", "x"]))
        method, path = draw(
            st.sampled_from(
                [
                    ("POST", "/v1/webhook_endpoints"),
                    ("PATCH", "/v1/webhook_endpoints/we_nope"),
                    ("POST", "/v1/webhook_endpoints/we_nope/rotate_secret"),
                    ("POST", "/v1/webhook_endpoints/we_nope/recover"),
                ]
            )
        )
        return Send(method, path, dump({"url": "https://127.0.0.1/hook", field: value}))
    if kind == "bulk":  # POST /v1/jobs/bulk: a bad item is refused in its own slot
        item = _submit(**{draw(st.sampled_from(SUBMIT_FIELDS)): value})
        return Send("POST", "/v1/jobs/bulk", dump({"jobs": [item, _submit()]}))
    if kind == "bulk_action":  # by filter; dry_run, so the accepted job is never touched
        field = draw(st.sampled_from(["status", "model", "created_after", "metadata", "x"]))
        action = draw(st.sampled_from(["bulk_cancel", "bulk_redrive", "bulk_delete"]))
        return Send("POST", f"/v1/jobs/{action}", dump({"where": {field: value}, "dry_run": True}))
    if kind == "batch":
        field = draw(st.sampled_from(["input_file_id", "completion_window", "metadata", "x"]))
        batch = {"input_file_id": "file_nope", "endpoint": "/v1/chat/completions"}
        return Send(
            "POST", "/v1/batches", dump({**batch, "completion_window": "24h", field: value})
        )
    if kind == "form":  # the dashboard's sign-in form
        fields = draw(st.lists(st.text(max_size=12), max_size=12))
        form = "&".join(["key=" + dump(value), *fields])
        return Send("POST", "/dashboard/login", form, "application/x-www-form-urlencoded")
    paths = ["/v1/jobs", "/v1/responses", "/v1/webhook_endpoints", "/v1/jobs/bulk", "/v1/batches"]
    path = draw(st.sampled_from(paths))
    return Send("POST", path, dump(value))


@dataclasses.dataclass(frozen=True)
class Target:
    key: str
    operator_key: str
    job_id: str
    before: bytes  # GET /v1/jobs/{job_id} before the storm (_unmoved)


@pytest.fixture
async def target(api: Api) -> Target:
    """A tenant and a job accepted before the storm (shared by every example)."""
    key = await api.key("acme")
    accepted = await api.http.post("/v1/jobs", json=_submit(), headers=_auth(key))
    assert accepted.status_code == 202
    job_id = accepted.json()["id"]
    before = await api.http.get(f"/v1/jobs/{job_id}", headers=_auth(key))
    return Target(key, await api.runtime.operators.create("ops"), job_id, _unmoved(before))


def _unmoved(view: httpx.Response) -> bytes:
    """A job's view but its place in line, which a job accepted ahead of it moves."""
    job = view.json()
    job.pop("queue_position", None)
    return json.dumps(job, sort_keys=True).encode()


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
    derandomize=True,  # CI runs the same storm every time; raise the count to search further
)
@given(storm=st.lists(requests(), min_size=1, max_size=3))
async def test_no_input_answers_5xx_or_changes_an_accepted_job(
    api: Api, target: Target, storm: list[Send | Batch]
) -> None:
    for step in storm:
        if isinstance(step, Batch):
            await _batch(api, target, step)
        else:
            await _send(api, target, step)
    after = await api.http.get(f"/v1/jobs/{target.job_id}", headers=_auth(target.key))
    assert _unmoved(after) == target.before


async def _send(api: Api, target: Target, step: Send) -> httpx.Response | None:
    """The answer to `step`, never a 5xx (None: the connection closed on a body too large)."""
    content = step.body.encode("utf-8", "surrogatepass")
    headers = {
        **_auth(target.operator_key if step.operator else target.key),
        "Content-Type": step.content_type,
    }
    try:
        response = await api.http.request(step.method, step.path, content=content, headers=headers)
    except httpx.TransportError:
        # A body over the limit is answered 413 before it is read, and the connection
        # closed: a client still uploading may see the close instead of the answer.
        assert len(content) > api.runtime.settings.max_body_bytes, (step.path, step.body[:300])
        return None
    assert response.status_code < 500, (step, response.text[:300])
    if step.path == "/v1/pauses" and response.status_code == 200:  # lifted: nothing held
        lifted = await api.http.delete(f"/v1/pauses/{response.json()['id']}", headers=headers)
        assert lifted.status_code == 200, lifted.text
    return response


async def _batch(api: Api, target: Target, step: Batch) -> None:
    """Upload the lines; if stored, make a batch of them and let the batches role validate
    and expand it (its passes must not fail); every read of it answers, never a 5xx."""
    form = _form([("purpose", None, "batch"), ("file", "storm.jsonl", step.lines)])
    uploaded = await _send(api, target, Send("POST", "/v1/files", form, FORM))
    if uploaded is None or uploaded.status_code != 200:
        return
    create = {"input_file_id": uploaded.json()["id"], "endpoint": step.endpoint}
    created = await _send(
        api, target, Send("POST", "/v1/batches", dump({**create, "completion_window": "24h"}))
    )
    if created is None or created.status_code != 200:
        return
    batch_id = created.json()["id"]
    runner = api.runtime.batch_runner()
    for _ in range(3):
        await runner.batches_once()
    read = await _send(api, target, Send("GET", f"/v1/batches/{batch_id}", ""))
    assert read is not None and read.status_code == 200
    assert read.json()["status"] in BATCH_STATUSES
    await _send(api, target, Send("POST", f"/v1/batches/{batch_id}/cancel", ""))
    await runner.batches_once()  # the cancel reaches the batch's jobs


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
