"""The Provider protocol: what a worker needs from an AI provider adapter."""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

JSONObject = dict[str, Any]


@dataclasses.dataclass(frozen=True, slots=True)
class ProviderCall:
    """One attempt at one job, as the worker hands it to an adapter."""

    job_id: str
    tenant_id: str
    endpoint: str
    body: JSONObject
    model: str | None
    attempt: int  # counted attempts, 1-based
    run_count: int  # every claim of this job, counted or not, 1-based
    # Send it with every create: the same on each re-send of one provider job (the job id),
    # a new one once a provider job of this job ended (Job.provider_idempotency_key).
    idempotency_key: str


@dataclasses.dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0

    def as_dict(self) -> JSONObject:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "total_tokens": self.input_tokens + self.output_tokens,
        }


@dataclasses.dataclass(frozen=True, slots=True)
class ProviderResult:
    body: JSONObject  # the provider's response body, stored as the job's result
    usage: Usage
    provider_request_id: str | None = None


class Provider(Protocol):
    name: str
    kind: str

    def validate(self, endpoint: str, body: JSONObject) -> None:
        """Raise errors.InvalidRequest (naming the param) for a body this provider cannot run.
        Called at submit time, so a bad job is refused before it is stored."""
        ...

    async def call(self, call: ProviderCall) -> ProviderResult:
        """Run the call to completion. Raises only errors.ProviderError subclasses, already
        classified. Must be cancellable: cancelling the task aborts the request."""
        ...

    async def aclose(self) -> None: ...
