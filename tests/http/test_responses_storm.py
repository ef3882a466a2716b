"""POST /v1/responses under generated input at every nested member of the create schema, on a
native provider and on the two that translate (Chat Completions, Anthropic Messages): never a
5xx; a refusal is a 400 the official SDK reads as BadRequestError naming the parameter; an
accepted create answers a Response that validates strictly.

JOBGATE_STORM_EXAMPLES sets the number of examples; CI keeps it modest.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from openai.types.responses import Response

from jobgate.config import ProviderConfig, Settings
from jobgate.process.runtime import Runtime
from jobgate.providers.anthropic import AnthropicProvider
from jobgate.providers.registry import ProviderRegistry
from jobgate.providers.simulated import SimProvider
from jobgate.storage.protocol import Storage
from jobgate.testing import FakeClock, SequentialIds
from tests.api_server import Api

pytestmark = pytest.mark.asyncio
EXAMPLES = int(os.environ.get("JOBGATE_STORM_EXAMPLES", "60"))
MODELS = ["sim-echo", "chat/m", "claude/c"]  # native, to Chat Completions, to Messages
UNUSED_URL = "http://127.0.0.1:9"  # never called: creates run in background, and no worker runs


@pytest.fixture
def runtime(storage: Storage, settings: Settings, clock: FakeClock) -> Runtime:
    registry = ProviderRegistry(
        {
            "sim": SimProvider("sim", clock=clock),
            "chat": SimProvider("chat", clock=clock),
            "claude": AnthropicProvider(
                "claude", ProviderConfig(kind="anthropic", base_url=UNUSED_URL)
            ),
        },
        configs={
            "sim": ProviderConfig(kind="sim", model_prefixes=("sim-",)),
            "chat": ProviderConfig(kind="sim", responses_api="chat_completions"),
            "claude": ProviderConfig(kind="anthropic", base_url=UNUSED_URL),
        },
        default="sim",
    )
    return Runtime(settings, storage=storage, clock=clock, ids=SequentialIds(), providers=registry)


@pytest.fixture
async def client(api: Api) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(
        base_url=f"{api.url}/v1",
        api_key=await api.key("acme"),
        max_retries=0,
        _strict_response_validation=True,
    ) as sdk:
        yield sdk


def _with(path: tuple[str | int, ...], value: Any, model: str) -> dict[str, Any]:
    """A valid background create with `value` set at `path`."""
    body: dict[str, Any] = {"model": model, "input": "hi", "background": True}
    _set(body, path, value)
    return body


def _set(body: dict[str, Any], path: tuple[str | int, ...], value: Any) -> None:
    """Set `value` at `path`, replacing what is on the way by the containers it needs."""
    node: Any = body
    for step, after in itertools.pairwise(path):
        child: Any = node[step] if isinstance(step, int) else node.get(step)
        if not isinstance(child, list if isinstance(after, int) else dict) or (
            isinstance(after, int) and not child
        ):
            child = [{}] if isinstance(after, int) else {}
            node[step] = child
        node = child
    node[path[-1]] = value


async def _create(client: openai.AsyncOpenAI, body: dict[str, Any]) -> Response | None:
    """The accepted Response, or None for a 400 (any other answer fails the test)."""
    try:
        return await client.post("/responses", body=body, cast_to=Response)
    except openai.BadRequestError as refused:
        assert refused.status_code == 400
        error = refused.body
        assert isinstance(error, dict) and error.get("type") == "invalid_request_error", error
        return None


NOT_STRINGS = [{"a": 1}, [], ["low"], {}]


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize(
    "path",
    [
        ("reasoning", "effort"),
        ("reasoning", "summary"),
        ("text", "verbosity"),
        ("text", "format", "type"),
        ("tool_choice", "type"),
    ],
)
async def test_an_object_or_list_where_a_string_belongs_is_a_400(
    client: openai.AsyncOpenAI, path: tuple[str, ...], model: str
) -> None:
    for value in NOT_STRINGS:
        with pytest.raises(openai.BadRequestError) as refused:
            await client.post("/responses", body=_with(path, value, model), cast_to=Response)
        assert refused.value.param == ".".join(path), refused.value.body


PATHS: list[tuple[str | int, ...]] = [
    ("reasoning",), ("reasoning", "effort"), ("reasoning", "summary"),
    ("reasoning", "generate_summary"), ("text",), ("text", "verbosity"), ("text", "format"),
    ("text", "format", "type"), ("text", "format", "name"), ("text", "format", "schema"),
    ("text", "format", "strict"), ("tool_choice",), ("tool_choice", "type"),
    ("tool_choice", "name"), ("tool_choice", "mode"), ("tool_choice", "tools"),
    ("tool_choice", "server_label"), ("tools",), ("tools", 0), ("tools", 0, "type"),
    ("tools", 0, "name"), ("tools", 0, "parameters"), ("tools", 0, "strict"),
    ("tools", 0, "description"), ("input",), ("input", 0), ("input", 0, "type"),
    ("input", 0, "role"), ("input", 0, "content"), ("input", 0, "content", 0),
    ("input", 0, "content", 0, "type"), ("input", 0, "content", 0, "text"),
    ("input", 0, "content", 0, "image_url"), ("input", 0, "call_id"), ("input", 0, "name"),
    ("input", 0, "arguments"), ("input", 0, "output"), ("instructions",), ("metadata",),
    ("metadata", "k"), ("max_output_tokens",), ("max_tool_calls",), ("temperature",),
    ("top_p",), ("top_logprobs",), ("parallel_tool_calls",), ("truncation",),
    ("service_tier",), ("user",), ("safety_identifier",), ("prompt_cache_key",), ("store",),
    ("include",), ("prompt",), ("sim",), ("sim", "fail_with"), ("sim", "tool_calls"),
    ("webhook",), ("unknown_member",),
]  # fmt: skip
WORDS = ["function", "text", "json_schema", "json_object", "low", "auto", "message", "user",
         "input_text", "input_image", "function_call", "function_call_output", "allowed_tools",
         "mcp", "custom", "required", "none", "f", ""]  # fmt: skip
leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**65), max_value=2**65),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(WORDS),
    st.text(max_size=8),
)
values = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(["type", "name", "text", "role", "x"]), inner, max_size=3),
    ),
    max_leaves=8,
)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=True,
)
@given(
    edits=st.lists(st.tuples(st.sampled_from(PATHS), values), min_size=1, max_size=3),
    model=st.sampled_from(MODELS),
)
async def test_generated_creates_answer_a_response_or_a_400(
    client: openai.AsyncOpenAI, edits: list[tuple[tuple[str | int, ...], Any]], model: str
) -> None:
    body = _with(("model",), model, model)
    for path, value in edits:
        _set(body, path, value)
    created = await _create(client, body)
    event("accepted" if created is not None else "refused")
    if created is not None:
        assert created.status == "queued" and created.background is True
