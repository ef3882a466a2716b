"""Request and response schemas of the native API (validation and /openapi.json)."""

from __future__ import annotations

from typing import Any, Literal

import pydantic


class WebhookSpec(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")

    url: str = pydantic.Field(max_length=2048, description="Where to POST signed events")
    event_types: list[str] = pydantic.Field(
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
    body: dict[str, Any] = pydantic.Field(description="The request body for the provider")
    provider: str | None = pydantic.Field(
        default=None, max_length=100, description="Provider name; default: routed by model"
    )
    metadata: dict[str, Any] = pydantic.Field(default_factory=dict, max_length=64)
    webhook: WebhookSpec | None = None
    priority: int | None = pydantic.Field(
        default=None, ge=0, le=9, description="0 runs first; default 5"
    )
    max_attempts: int | None = pydantic.Field(default=None, ge=1, le=20)
    start_timeout_s: float | None = pydantic.Field(
        default=None, gt=0, description="Expire the job if no worker starts it in time"
    )
    execution_timeout_s: float | None = pydantic.Field(
        default=None, gt=0, description="Fail the job (deadline_exceeded) past this runtime"
    )
    stream: bool = pydantic.Field(
        default=False,
        description="Live output: the worker streams the provider call and its output deltas "
        "are served at GET /v1/jobs/{id}/stream while the job runs",
    )


class ErrorOut(pydantic.BaseModel):
    code: str
    message: str
    type: str


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
    creation_outcome: str | None
    cancel_outcome: str | None
    progress: float | None
    result: dict[str, Any] | None
    error: ErrorOut | None
    usage: dict[str, Any] | None
    metadata: dict[str, Any]
    dead_lettered: bool
    purged: bool


class JobListOut(pydantic.BaseModel):
    object: Literal["list"]
    data: list[JobOut]
    has_more: bool
    last_id: str | None


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
