"""A property test: generated JSON thrown at every write route of a real server (and the
dashboard's sign-in form), on both backends. Extreme numbers, non-finite floats, integers
beyond 64 bits, lone surrogates, NUL, deep nesting, huge strings and unknown fields, raw or
inside otherwise valid requests. Never a 5xx, and a job accepted before the storm reads byte
for byte the same after it.

JOBGATE_STORM_EXAMPLES sets the number of examples (1-3 requests each) per backend; CI keeps
it modest.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.api_server import Api

EXAMPLES = int(os.environ.get("JOBGATE_STORM_EXAMPLES", "60"))


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


@st.composite
def requests(draw: st.DrawFn) -> tuple[str, str, str]:
    """(method, path, raw JSON body)."""
    kinds = ["job", "job_body", "job_sim", "response", "endpoint", "form", "raw", "bulk", "batch"]
    kinds += ["bulk_action"]
    kind = draw(st.sampled_from(kinds))
    value = draw(values)
    if kind == "job":
        return "POST", "/v1/jobs", dump(_submit(**{draw(st.sampled_from(SUBMIT_FIELDS)): value}))
    if kind == "job_body":
        job = _submit()
        job["body"][draw(st.sampled_from(BODY_FIELDS))] = value
        return "POST", "/v1/jobs", dump(job)
    if kind == "job_sim":
        job = _submit()
        job["body"]["sim"] = {draw(st.sampled_from(SIM_FIELDS)): value}
        return "POST", "/v1/jobs", dump(job)
    if kind == "response":
        body: dict[str, Any] = {"model": "sim-echo", "input": "hi", "background": True}
        body[draw(st.sampled_from(RESPONSE_FIELDS))] = value
        return "POST", "/v1/responses", dump(body)
    if kind == "endpoint":
        field = draw(st.sampled_from(["description", "event_types", "include_result", "x"]))
        route = draw(
            st.sampled_from(
                [
                    ("POST", "/v1/webhook_endpoints"),
                    ("PATCH", "/v1/webhook_endpoints/we_nope"),
                    ("POST", "/v1/webhook_endpoints/we_nope/rotate_secret"),
                    ("POST", "/v1/webhook_endpoints/we_nope/recover"),
                ]
            )
        )
        return *route, dump({"url": "https://127.0.0.1/hook", field: value})
    if kind == "bulk":  # POST /v1/jobs/bulk: a bad item is refused in its own slot
        item = _submit(**{draw(st.sampled_from(SUBMIT_FIELDS)): value})
        return "POST", "/v1/jobs/bulk", dump({"jobs": [item, _submit()]})
    if kind == "bulk_action":  # by filter; dry_run, so the accepted job is never touched
        field = draw(st.sampled_from(["status", "model", "created_after", "metadata", "x"]))
        action = draw(st.sampled_from(["bulk_cancel", "bulk_redrive", "bulk_delete"]))
        return "POST", f"/v1/jobs/{action}", dump({"where": {field: value}, "dry_run": True})
    if kind == "batch":
        field = draw(st.sampled_from(["input_file_id", "completion_window", "metadata", "x"]))
        batch = {"input_file_id": "file_nope", "endpoint": "/v1/chat/completions"}
        return "POST", "/v1/batches", dump({**batch, "completion_window": "24h", field: value})
    if kind == "form":  # the dashboard's sign-in form
        fields = draw(st.lists(st.text(max_size=12), max_size=12))
        return "POST", "/dashboard/login", "&".join(["key=" + dump(value), *fields])
    paths = ["/v1/jobs", "/v1/responses", "/v1/webhook_endpoints", "/v1/jobs/bulk", "/v1/batches"]
    path = draw(st.sampled_from(paths))
    return "POST", path, dump(value)


@dataclasses.dataclass(frozen=True)
class Target:
    key: str
    job_id: str
    before: bytes  # GET /v1/jobs/{job_id} before the storm


@pytest.fixture
async def target(api: Api) -> Target:
    """A tenant and a job accepted before the storm (shared by every example)."""
    key = await api.key("acme")
    accepted = await api.http.post("/v1/jobs", json=_submit(), headers=_auth(key))
    assert accepted.status_code == 202
    job_id = accepted.json()["id"]
    before = await api.http.get(f"/v1/jobs/{job_id}", headers=_auth(key))
    return Target(key, job_id, before.content)


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
    api: Api, target: Target, storm: list[tuple[str, str, str]]
) -> None:
    for method, path, raw in storm:
        content = raw.encode("utf-8", "surrogatepass")
        try:
            response = await api.http.request(
                method, path, content=content, headers=_auth(target.key)
            )
        except httpx.TransportError:
            # A body over the limit is answered 413 before it is read, and the connection
            # closed: a client still uploading may see the close instead of the answer.
            assert len(content) > api.runtime.settings.max_body_bytes, (method, path, raw[:300])
            continue
        assert response.status_code < 500, (method, path, raw[:300], response.text[:300])
    after = await api.http.get(f"/v1/jobs/{target.job_id}", headers=_auth(target.key))
    assert after.content == target.before


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
