"""Request and response schemas of the webhook API (validation and /openapi.json)."""

from __future__ import annotations

from typing import Literal

import pydantic

from jobgate.domain import webhooks
from jobgate.services.webhooks import DEFAULT_ROTATION_GRACE_S, MAX_ROTATION_GRACE_S

_EVENT_TYPES = (
    "Events to send; empty means every terminal event (job.running, job.progress and "
    "batch.progress are opt-in)"
)
_MIN_INTERVAL_S, _MAX_INTERVAL_S = webhooks.PROGRESS_INTERVAL_RANGE_S
_PROGRESS_INTERVAL = (
    "job.progress and batch.progress: at most one per job or batch per this many seconds (a "
    "running streaming job's output_tokens and progress; an in-progress batch's request_counts)"
)


class CreateEndpointRequest(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")

    url: str = pydantic.Field(
        min_length=8,
        max_length=2048,
        pattern=r"^[Hh][Tt][Tt][Pp][Ss]?://[^\s/?#]+",
        description="An https URL (SSRF-checked)",
    )
    event_types: list[str] = pydantic.Field(
        default_factory=list, max_length=16, description=_EVENT_TYPES
    )
    description: str = pydantic.Field(default="", max_length=500)
    include_result: bool = pydantic.Field(
        default=False,
        description="Send the job's result, error and usage in `data` (results above 256 KiB "
        "are left out and `data.result_truncated` is true)",
    )
    progress_interval_s: float = pydantic.Field(
        default=webhooks.DEFAULT_PROGRESS_INTERVAL_S,
        ge=_MIN_INTERVAL_S,
        le=_MAX_INTERVAL_S,
        description=_PROGRESS_INTERVAL,
    )
    disabled: bool = False


class UpdateEndpointRequest(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")

    url: str | None = pydantic.Field(
        default=None, min_length=8, max_length=2048, pattern=r"^[Hh][Tt][Tt][Pp][Ss]?://[^\s/?#]+"
    )
    event_types: list[str] | None = pydantic.Field(default=None, max_length=16)
    description: str | None = pydantic.Field(default=None, max_length=500)
    include_result: bool | None = None
    progress_interval_s: float | None = pydantic.Field(
        default=None, ge=_MIN_INTERVAL_S, le=_MAX_INTERVAL_S, description=_PROGRESS_INTERVAL
    )
    disabled: bool | None = None


class RotateSecretRequest(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")

    grace_period_s: int = pydantic.Field(
        default=DEFAULT_ROTATION_GRACE_S,
        ge=0,
        le=MAX_ROTATION_GRACE_S,
        description="How long the old secret keeps signing (as a second v1 signature)",
    )


class RecoverRequest(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")

    since: int = pydantic.Field(
        ge=0,
        le=253_402_300_799,  # 9999-12-31: the last second a datetime can hold
        description="Unix seconds: re-queue failures since then",
    )


class EndpointOut(pydantic.BaseModel):
    id: str
    object: Literal["webhook_endpoint"]
    url: str
    description: str
    event_types: list[str]
    include_result: bool
    progress_interval_s: float
    disabled: bool
    disabled_reason: str | None
    previous_secret_expires_at: int | None = pydantic.Field(
        description="While set and in the future, the previous secret also signs"
    )
    created_at: int
    updated_at: int
    secret: str | None = pydantic.Field(
        default=None, description="Only in the answers to create and rotate_secret"
    )


class EndpointListOut(pydantic.BaseModel):
    object: Literal["list"]
    data: list[EndpointOut]
    has_more: bool
    last_id: str | None


class DeletedOut(pydantic.BaseModel):
    id: str
    object: Literal["webhook_endpoint"]
    deleted: bool


class PingOut(pydantic.BaseModel):
    object: Literal["webhook_test"]
    event_id: str
    succeeded: bool
    status_code: int | None
    latency_ms: int
    error: str | None


class RecoverOut(pydantic.BaseModel):
    object: Literal["webhook_recovery"]
    endpoint_id: str
    requeued: int


class SecretOut(pydantic.BaseModel):
    secret: str


class AttemptOut(pydantic.BaseModel):
    attempt: int
    status_code: int | None
    latency_ms: int
    error: str | None
    succeeded: bool
    created_at: int


class DeliveryOut(pydantic.BaseModel):
    id: str
    object: Literal["webhook_delivery"]
    event_id: str
    event_type: str
    endpoint_id: str | None
    url: str | None
    status: Literal["pending", "succeeded", "failed"]
    attempts: list[AttemptOut]
    next_attempt_at: int | None
    last_status_code: int | None
    last_error: str | None
    created_at: int
    completed_at: int | None


class DeliveryListOut(pydantic.BaseModel):
    object: Literal["list"]
    data: list[DeliveryOut]
