"""Every exception jobgate raises on purpose, with its data as attributes.

JobgateError
├── ConfigError                  a bad setting (names it)
├── StorageError
│   └── StorageUnavailable       the database cannot be reached (retry_after_s)
├── LeaseLost                    a fenced write by a worker whose lease was reclaimed
├── Unauthorized                 missing, unknown or revoked API key
├── Forbidden                    a valid key that may not do this (a tenant key, operator route)
├── NotFound                     missing, or another tenant's (indistinguishable by design)
├── InvalidRequest               bad input (param, code)
│   ├── UnknownProvider
│   ├── PayloadTooLarge
│   └── WebhookUrlRefused        the SSRF guard refuses a webhook URL (reason)
├── Conflict                     a valid request the object's current state refuses
├── IdempotencyKeyReused         same key, different body
├── IdempotencyInProgress        same key while the first submit is still committing
├── LimitExceeded                a tenant limit refuses the request (limit)
│   ├── QueueFull                backpressure (retry_after_s)
│   └── TooManyStreams           a tenant's live stream readers at their bound (retry_after_s)
└── ProviderError                classified once, inside the adapter
    ├── ProviderRetryable        timeouts, 5xx, overloaded
    ├── ProviderRateLimited      429 (retry_after_s)
    ├── ProviderFatal            4xx, auth, invalid request
    │   └── ProviderQuotaExceeded  out of quota / over a spend limit (a 429 that is billing)
    ├── ProviderOutcomeUnknown   the create call may or may not have reached the provider
    │                            (safe_to_retry: the provider deduplicates by idempotency key)
    └── ProviderCancelUnsupported  the provider cannot cancel a job it runs
"""

from __future__ import annotations


class JobgateError(Exception):
    """Base of every jobgate error."""

    code: str = "internal_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ConfigError(JobgateError):
    code = "config_error"

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(f"{setting}: {message}")
        self.setting = setting


class StorageError(JobgateError):
    code = "storage_error"


class StorageUnavailable(StorageError):
    code = "storage_unavailable"

    def __init__(self, message: str = "storage is unavailable", retry_after_s: int = 2) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class LeaseLost(JobgateError):
    code = "lease_lost"

    def __init__(self, job_id: str) -> None:
        super().__init__(f"lease on job {job_id} was lost; the write was dropped")
        self.job_id = job_id


class Unauthorized(JobgateError):
    code = "invalid_api_key"


class Forbidden(JobgateError):
    code = "forbidden"


class NotFound(JobgateError):
    code = "not_found"

    def __init__(self, kind: str, object_id: str) -> None:
        super().__init__(f"no {kind} with id {object_id!r}")
        self.kind = kind
        self.object_id = object_id


class InvalidRequest(JobgateError):
    code = "invalid_request"

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.param = param
        if code is not None:
            self.code = code


class UnknownProvider(InvalidRequest):
    def __init__(self, provider: str, *, note: str = "") -> None:
        super().__init__(
            f"unknown provider {provider!r}" + (f": it {note}" if note else ""),
            param="provider",
            code="unknown_provider",
        )
        self.provider = provider


class PayloadTooLarge(InvalidRequest):
    def __init__(self, limit_bytes: int) -> None:
        super().__init__(f"request body exceeds {limit_bytes} bytes", code="payload_too_large")
        self.limit_bytes = limit_bytes


class WebhookUrlRefused(InvalidRequest):
    """A webhook URL the SSRF guard refuses; `reason` names the rule (e.g. `loopback`).

    `permanent` is False when the refusal depends on what DNS answers now (a delivery retries).
    """

    def __init__(
        self, reason: str, message: str, *, param: str | None = "url", permanent: bool = True
    ) -> None:
        super().__init__(message, param=param, code="webhook_url_refused")
        self.reason = reason
        self.permanent = permanent


class Conflict(JobgateError):
    code = "conflict"

    def __init__(self, message: str, *, code: str = "conflict") -> None:
        super().__init__(message)
        self.code = code


class IdempotencyKeyReused(JobgateError):
    code = "idempotency_key_reused"

    def __init__(self) -> None:
        super().__init__("this Idempotency-Key was already used with a different request body")


class IdempotencyInProgress(JobgateError):
    code = "idempotency_key_in_progress"

    def __init__(self, retry_after_s: int = 1) -> None:
        super().__init__("a request with this Idempotency-Key is still being processed")
        self.retry_after_s = retry_after_s


class LimitExceeded(JobgateError):
    code = "limit_exceeded"

    def __init__(self, limit: str, message: str, *, status: int = 403) -> None:
        super().__init__(message)
        self.limit = limit
        self.status = status


class QueueFull(LimitExceeded):
    code = "queue_full"

    def __init__(self, limit: str, retry_after_s: int) -> None:
        super().__init__(limit, f"queue is full ({limit}); retry later", status=429)
        self.retry_after_s = retry_after_s


class TooManyStreams(LimitExceeded):
    code = "too_many_streams"

    def __init__(self, bound: int, retry_after_s: int) -> None:
        super().__init__(
            "stream_readers_per_tenant",
            f"this tenant already has {bound} live streams open on this server "
            "(stream_readers_per_tenant); close one or retry later",
            status=429,
        )
        self.retry_after_s = retry_after_s


class ProviderError(JobgateError):
    """A provider call failed; subclasses say what the worker may do about it."""

    code = "provider_error"

    def __init__(
        self, message: str, *, code: str | None = None, status_code: int | None = None
    ) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.status_code = status_code
        # The provider's id for the request that failed (`x-request-id`, Anthropic's
        # `request-id`), set by the adapter when the answer carried one.
        self.request_id: str | None = None


class ProviderRetryable(ProviderError):
    code = "server_error"


class ProviderRateLimited(ProviderError):
    code = "rate_limit_exceeded"

    def __init__(
        self, message: str, *, retry_after_s: float, status_code: int | None = 429
    ) -> None:
        super().__init__(message, status_code=status_code)
        self.retry_after_s = retry_after_s


class ProviderFatal(ProviderError):
    code = "invalid_request"


class ProviderQuotaExceeded(ProviderFatal):
    """The account is out of quota or over a spend limit (a 429 that is billing, not rate):
    retrying does not restore access, so the job fails; it says nothing about the health of
    the provider's other models."""

    code = "insufficient_quota"


class ProviderOutcomeUnknown(ProviderError):
    code = "creation_outcome_unknown"

    def __init__(
        self,
        message: str,
        *,
        safe_to_retry: bool = False,
        code: str | None = None,
        status_code: int | None = None,
    ) -> None:
        super().__init__(message, code=code, status_code=status_code)
        # True when the provider deduplicates creates by the idempotency key we sent: sending
        # the create again returns the original instead of running (and billing) it twice.
        self.safe_to_retry = safe_to_retry


class ProviderCancelUnsupported(ProviderError):
    code = "cancel_not_supported"
