"""Request and response schemas of /v1/responses (validation and /openapi.json).

The create body is checked strictly (no coercion): the stored request is the client's JSON as
sent, and every setting it holds is echoed back in Response objects that clients validate.
Members not named here pass through to a provider that speaks the Responses API natively.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import pydantic

from jobgate.domain import ranges
from jobgate.http.schemas.native import SimDirectives, WebhookSpec

MetadataKey = Annotated[str, pydantic.Field(max_length=64)]
MetadataValue = Annotated[str, pydantic.Field(max_length=512)]
ShortText = Annotated[str, pydantic.Field(max_length=512)]


class ConversationRef(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(strict=True, extra="forbid")

    id: str = pydantic.Field(max_length=256)


class CreateResponseRequest(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(strict=True, extra="allow")

    model: str = pydantic.Field(
        min_length=1,
        max_length=256,
        examples=["sim-echo"],
        description="Routed to a provider: `provider/model`, a configured model or prefix "
        "(`sim-` runs on the built-in simulator), else the default provider",
    )
    # Checked for emptiness by hand (a constrained union would name its branch in errors).
    input: Annotated[
        str | list[dict[str, Any]],
        pydantic.WithJsonSchema(
            {
                "anyOf": [
                    {"type": "string", "minLength": 1},
                    {"type": "array", "minItems": 1, "items": {"type": "object"}},
                ]
            }
        ),
    ] = pydantic.Field(description="A string, or an array of Responses input items")
    instructions: str | None = None
    background: bool | None = pydantic.Field(
        default=None,
        description="Answer at once with the `queued` Response; otherwise the request waits "
        "for the finished one (and a client that disconnects cancels it)",
    )
    stream: bool | None = pydantic.Field(
        default=None, description="Answer with the `response.*` events (server-sent events)"
    )
    store: bool | None = None
    metadata: dict[MetadataKey, MetadataValue] | None = pydantic.Field(default=None, max_length=16)
    max_output_tokens: int | None = pydantic.Field(default=None, ge=1, le=ranges.MAX_OUTPUT_TOKENS)
    max_tool_calls: int | None = pydantic.Field(default=None, ge=1, le=ranges.MAX_TOOL_CALLS)
    temperature: float | None = pydantic.Field(default=None, ge=0, le=2, allow_inf_nan=False)
    top_p: float | None = pydantic.Field(default=None, ge=0, le=1, allow_inf_nan=False)
    top_logprobs: int | None = pydantic.Field(default=None, ge=0, le=20)
    parallel_tool_calls: bool | None = None
    tools: list[dict[str, Any]] | None = pydantic.Field(default=None, max_length=128)
    tool_choice: Literal["auto", "none", "required"] | dict[str, Any] | None = None
    text: dict[str, Any] | None = None
    reasoning: dict[str, Any] | None = None
    truncation: Literal["auto", "disabled"] | None = None
    service_tier: Literal["auto", "default", "flex", "scale", "priority"] | None = None
    user: ShortText | None = None
    safety_identifier: ShortText | None = None
    prompt_cache_key: ShortText | None = None
    previous_response_id: str | None = pydantic.Field(
        default=None,
        max_length=256,
        description="Continue from this earlier response: its input and output come before "
        "`input` (jobgate assembles them, for every provider)",
    )
    conversation: str | ConversationRef | None = pydantic.Field(
        default=None,
        description='Continue this conversation (an id, or `{"id": …}`): its items come '
        "before `input`, and this response's input and output are added to it once it "
        "completes",
    )
    sim: SimDirectives | None = pydantic.Field(
        default=None, description="jobgate extension: directives for the built-in simulator"
    )
    webhook: WebhookSpec | None = pydantic.Field(
        default=None,
        description="jobgate extension: a URL that receives this response's signed "
        "`response.*` events (signed with the tenant's default secret)",
    )
    on_retry: Literal["continue", "restart"] | None = pydantic.Field(
        default=None,
        description="jobgate extension, with `stream: true`: `continue` makes a retried "
        "attempt go on from the text already streamed, where the provider takes an assistant "
        "prefix (else it starts over, `output.reset`); `restart` (default) starts over",
    )


class ResponseOut(pydantic.BaseModel):
    """An OpenAI Response object (every member OpenAI defines is present; `expired` is
    jobgate's: a response that no worker started before its start deadline)."""

    model_config = pydantic.ConfigDict(extra="allow")

    id: str
    object: Literal["response"]
    created_at: int
    status: Literal["queued", "in_progress", "completed", "incomplete", "failed", "cancelled"]
    background: bool
    completed_at: int | None
    error: dict[str, Any] | None
    incomplete_details: dict[str, Any] | None
    instructions: str | None
    max_output_tokens: int | None
    max_tool_calls: int | None
    metadata: dict[str, Any]
    model: str
    output: list[dict[str, Any]]
    parallel_tool_calls: bool
    previous_response_id: str | None
    conversation: dict[str, Any] | None = None
    prompt_cache_key: str | None
    reasoning: dict[str, Any] | None
    safety_identifier: str | None
    service_tier: str | None
    temperature: float | None
    text: dict[str, Any]
    tool_choice: str | dict[str, Any]
    tools: list[dict[str, Any]]
    top_logprobs: int | None
    top_p: float | None
    truncation: str | None
    usage: dict[str, Any] | None
    user: str | None
    expired: bool


class DeletedResponseOut(pydantic.BaseModel):
    id: str
    object: Literal["response.deleted"]
    deleted: Literal[True]
