"""The Provider protocol: what a worker needs from an AI provider adapter."""

from __future__ import annotations

from typing import Any, Protocol

from jobgate.domain import frozen

JSONObject = dict[str, Any]


@frozen.record  # built once per call by the worker
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
    # A streamed answer silent this long has stalled: the attempt ends, retryable (None: only
    # the client's read timeout, request_timeout_s, bounds the silence).
    stall_timeout_s: float | None = None


@frozen.record  # built once per call by the worker
class Usage:
    input_tokens: int = 0  # every input token, prompt-cache reads and writes included
    output_tokens: int = 0
    # Of input_tokens: read from / written to the provider's prompt cache (priced apart).
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0

    def as_dict(self) -> JSONObject:
        counted: JSONObject = {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "total_tokens": self.input_tokens + self.output_tokens,
        }
        if self.cache_read_input_tokens:
            counted["cache_read_input_tokens"] = self.cache_read_input_tokens
        if self.cache_creation_input_tokens:
            counted["cache_creation_input_tokens"] = self.cache_creation_input_tokens
        return counted

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_input_tokens + other.cache_read_input_tokens,
            self.cache_creation_input_tokens + other.cache_creation_input_tokens,
        )


def _count(usage: JSONObject, key: str) -> int:
    value = usage.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def anthropic_usage(raw: object) -> Usage:
    """An Anthropic `usage`: its `input_tokens` leaves out cache reads and writes, which are
    billed too (reads at a tenth of the input price, writes at 1.25x), so they are added."""
    usage = raw if isinstance(raw, dict) else {}
    cache_read = _count(usage, "cache_read_input_tokens")
    cache_write = _count(usage, "cache_creation_input_tokens")
    return Usage(
        _count(usage, "input_tokens") + cache_read + cache_write,
        _count(usage, "output_tokens"),
        cache_read_input_tokens=cache_read,
        cache_creation_input_tokens=cache_write,
    )


def openai_usage(raw: object) -> Usage:
    """An OpenAI `usage` (Responses or Chat Completions): input already includes cached
    tokens, broken out in `input_tokens_details` / `prompt_tokens_details`."""
    usage = raw if isinstance(raw, dict) else {}
    details = usage.get("input_tokens_details") or usage.get("prompt_tokens_details")
    details = details if isinstance(details, dict) else {}
    return Usage(
        _count(usage, "input_tokens") or _count(usage, "prompt_tokens"),
        _count(usage, "output_tokens") or _count(usage, "completion_tokens"),
        cache_read_input_tokens=_count(details, "cached_tokens"),
        cache_creation_input_tokens=_count(details, "cache_write_tokens"),
    )


@frozen.record  # built once per call by the worker
class ProviderResult:
    body: JSONObject  # the provider's response body, stored as the job's result
    usage: Usage
    provider_request_id: str | None = None  # the provider's id of the answer (body `id`)
    request_id: str | None = None  # the HTTP request's `x-request-id` / Anthropic `request-id`


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
