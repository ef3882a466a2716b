"""Request and response schemas of the native API (validation and /openapi.json)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import pydantic

from jobgate.domain import ranges


class SimDirectives(pydantic.BaseModel):
    """The built-in simulator's directives (`sim` in a provider body; other adapters move it
    to a header). Members not named here are checked by the simulator itself."""

    model_config = pydantic.ConfigDict(extra="allow")

    latency_s: float | None = pydantic.Field(
        default=None,
        ge=0,
        le=ranges.SIM_MAX_LATENCY_S,
        allow_inf_nan=False,
        description="How long the simulated call takes",
    )
    fail_with: (
        Literal[
            "rate_limit", "quota", "server_error", "overloaded", "invalid_request", "hang", "drop",
            "stream_rate_limit", "stream_server_error", "stream_overloaded", "stream_quota",
            "stream_stall",
        ]
        | None
    ) = None  # fmt: skip
    fail_times: int | None = pydantic.Field(
        default=None,
        ge=0,
        le=ranges.SIM_MAX_FAIL_TIMES,
        description="How many calls fail before one succeeds (default: all of them)",
    )
    retry_after_s: float | None = pydantic.Field(
        default=None, ge=0, le=ranges.SIM_MAX_RETRY_AFTER_S, allow_inf_nan=False
    )
    outcome: Literal["completed", "failed", "rejected", "incomplete", "never"] | None = None
    webhooks: Literal["send", "none", "duplicate", "out_of_order", "early"] | None = None
    cancel: Literal["supported", "unsupported"] | None = None
    cut_at: float | None = pydantic.Field(
        default=None,
        gt=0,
        lt=1,
        allow_inf_nan=False,
        description="Where a stream_* fault cuts a streamed answer, as a fraction of its "
        "deltas (default 0.5)",
    )
    tool_calls: int | None = pydantic.Field(
        default=None,
        ge=0,
        le=ranges.SIM_MAX_TOOL_CALLS,
        description="How many calls to the request's function tools follow the text",
    )


class ProviderBody(pydantic.BaseModel):
    """The request body for the provider: passed on as sent; only the members jobgate reads
    are checked here."""

    model_config = pydantic.ConfigDict(extra="allow")

    model: str | None = pydantic.Field(
        default=None,
        min_length=1,
        max_length=256,
        examples=["sim-echo"],
        description="Routes the job: a model no configured provider serves is refused "
        "(400 model_not_found); `sim-*` runs on the built-in simulator",
    )
    sim: SimDirectives | None = None


class WebhookSpec(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")

    url: str = pydantic.Field(max_length=2048, description="Where to POST signed events")
    event_types: list[Annotated[str, pydantic.Field(max_length=64)]] = pydantic.Field(
        default_factory=list,
        max_length=16,
        description="Events to send; empty means every terminal event",
    )


class SubmitJobRequest(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")

    endpoint: str = pydantic.Field(
        min_length=1,
        max_length=200,
        examples=["/v1/chat/completions"],
        description="The provider endpoint to call",
    )
    body: ProviderBody = pydantic.Field(description="The request body for the provider")
    provider: str | None = pydantic.Field(
        default=None, max_length=100, description="Provider name; default: routed by model"
    )
    metadata: dict[str, Any] = pydantic.Field(
        default_factory=dict, max_length=ranges.MAX_METADATA_ITEMS
    )
    webhook: WebhookSpec | None = None
    priority: int | None = pydantic.Field(
        default=None,
        ge=ranges.PRIORITY_MIN,
        le=ranges.PRIORITY_MAX,
        description="0 runs first; default 5",
    )
    max_attempts: int | None = pydantic.Field(default=None, ge=1, le=ranges.MAX_ATTEMPTS_MAX)
    start_timeout_s: float | None = pydantic.Field(
        default=None,
        ge=ranges.MIN_TIMEOUT_S,
        le=ranges.MAX_TIMEOUT_S,
        allow_inf_nan=False,
        description="Expire the job if no worker starts it in time (at most 7 days)",
    )
    execution_timeout_s: float | None = pydantic.Field(
        default=None,
        ge=ranges.MIN_TIMEOUT_S,
        le=ranges.MAX_TIMEOUT_S,
        allow_inf_nan=False,
        description="Fail the job (deadline_exceeded) past this runtime (at most 7 days)",
    )
    stream: bool = pydantic.Field(
        default=False,
        description="Live output: the worker streams the provider call and its output deltas "
        "are served at GET /v1/jobs/{id}/stream while the job runs",
    )
    stall_timeout_s: float | None = pydantic.Field(
        default=None,
        ge=ranges.MIN_STALL_TIMEOUT_S,
        le=ranges.MAX_STALL_TIMEOUT_S,
        allow_inf_nan=False,
        description="A streamed answer silent this long ends the attempt as a retryable "
        "timeout (`stream_stalled`); default JOBGATE_STALL_TIMEOUT_S (120)",
    )
    on_retry: Literal["continue", "restart"] | None = pydantic.Field(
        default=None,
        description="Streaming chat, Responses and Messages jobs: `continue` makes a retried "
        "attempt go on from the partial output already streamed, where the provider takes an "
        "assistant prefix (else it starts over, `output.reset`); `restart` (default) starts "
        "over",
    )
    run_at: float | None = pydantic.Field(
        default=None,
        ge=0,
        le=ranges.RUN_AT_MAX,
        allow_inf_nan=False,
        description="Unix seconds before which the job is not started (the past means now); "
        "the start timeout counts from then",
    )
    delay_s: float | None = pydantic.Field(
        default=None,
        ge=0,
        le=ranges.MAX_DELAY_S,
        allow_inf_nan=False,
        description="Start no sooner than this many seconds after the submit (not with run_at)",
    )
    concurrency_key: str | None = pydantic.Field(
        default=None,
        min_length=1,
        max_length=ranges.MAX_CONCURRENCY_KEY_CHARS,
        description="Jobs sharing a key (e.g. one end user) share the tenant's limits per key: "
        "max_running_per_key, rpm_per_key and the daily budgets per key",
    )

    @pydantic.model_validator(mode="after")
    def _one_schedule(self) -> SubmitJobRequest:
        if self.run_at is not None and self.delay_s is not None:
            raise ValueError("give run_at or delay_s, not both")
        return self


class ErrorOut(pydantic.BaseModel):
    code: str
    message: str
    type: str


class WaitingOut(pydantic.BaseModel):
    reason: Literal[
        "scheduled",
        "paused",
        "breaker_open",
        "rate_limited",
        "tenant_cap",
        "key_cap",
        "budget_exhausted",
        "no_worker",
        "queue",
    ]
    detail: str = pydantic.Field(description="The same, as a sentence for people")
    until: int | None = pydantic.Field(
        description="Unix seconds when it should end by itself (null: not by itself)"
    )


class JobOut(pydantic.BaseModel):
    id: str
    object: Literal["job"]
    status: Literal["queued", "running", "succeeded", "failed", "cancelled", "expired"]
    provider: str
    endpoint: str
    model: str | None
    created_at: int
    started_at: int | None
    completed_at: int | None
    cancel_requested_at: int | None
    expires_at: int | None
    attempt: int
    max_attempts: int
    priority: int
    phase: str | None
    provider_job_id: str | None
    provider_request_id: str | None = pydantic.Field(
        default=None,
        description="the provider's request id (`x-request-id`, Anthropic `request-id`) of "
        "the attempt that succeeded; a failed attempt's is `error.request_id`",
    )
    creation_outcome: str | None
    cancel_outcome: str | None
    progress: float | None
    run_at: int
    concurrency_key: str | None
    last_checked_at: int | None  # background mode: when the reconciler last asked the provider
    queue_position: int | None = pydantic.Field(
        default=None,
        description="GET of a queued job: 1 + the tenant's claimable jobs ahead of it in claim "
        "order, among the 100 nearest ahead (a job farther back reads a floor, 101 in a line "
        "of claimable jobs: see `queue_position_exact`; an estimate: fair share across tenants "
        "decides how fast the line moves)",
    )
    queue_position_exact: bool | None = pydantic.Field(
        default=None,
        description="GET of a queued job: true when `queue_position` is its place, false when "
        "it is a floor (at least that place: `101+`); the place is walked over at most 100 "
        "jobs ahead, so that a status read costs the same behind any backlog",
    )
    output_tokens: int | None = pydantic.Field(
        default=None,
        description="GET of a running streaming job: output tokens streamed so far by its "
        "current attempt (an estimate: characters / 4); `progress` is then their fraction of "
        "the request's `max_tokens` (or `max_completion_tokens`, `max_output_tokens`), below 1",
    )
    waiting: WaitingOut | None = pydantic.Field(
        default=None,
        description="GET of a job: why it is not being worked on, by the rules the claim "
        "applies (a queued job: its run_at, a pause, no live worker, its tenant's budget, its "
        "provider's breaker or rate limit, its tenant's or concurrency key's cap, or its turn "
        "in `queue`); a background-mode job: no reconciler running. null: nothing holds it (a "
        "queued job is first in line and a worker may claim it now)",
    )
    note: str | None = pydantic.Field(
        default=None,
        description="GET of a job: `waiting.detail` when something outside the job holds it "
        "up (not for a job that only waits its turn)",
    )
    result: dict[str, Any] | None
    error: ErrorOut | None
    usage: dict[str, Any] | None
    metadata: dict[str, Any]
    dead_lettered: bool
    purged: bool


class JobListOut(pydantic.BaseModel):
    object: Literal["list"]
    data: list[JobOut]
    has_more: bool = pydantic.Field(description="More jobs may follow: page on with `after`")
    last_id: str | None = pydantic.Field(
        description="The next page's `after`: the last job this page read (on a search's "
        "partial page, a job not in `data`)"
    )


class EventOut(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(populate_by_name=True)

    object: Literal["job.event"]
    job_id: str
    seq: int
    from_: str | None = pydantic.Field(alias="from")
    to: str
    actor: str
    reason: str | None
    applied: bool
    created_at: int


class EventListOut(pydantic.BaseModel):
    object: Literal["list"]
    data: list[EventOut]
    has_more: bool


class ProblemOut(pydantic.BaseModel):
    type: str
    title: str
    status: int
    detail: str
    code: str
    error: dict[str, Any]
