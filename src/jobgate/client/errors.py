"""Everything the client raises, keyed on the problem's code first and its HTTP status second.

ClientError
├── CredentialsError              no API key could be found (says where it looked)
├── APIConnectionError            no answer: refused, reset, timed out (outcome_unknown says
│   └── APITimeoutError           whether the server may have received the request)
├── WaitTimeout                   wait()'s total timeout ran out (job: the last one seen)
└── APIStatusError                the server answered a problem (status, code, retry_after_s…)
    ├── BadRequestError           400
    ├── AuthenticationError       401 invalid_api_key
    ├── PermissionDeniedError     403 limit_exceeded …
    ├── NotFoundError             404 (missing, or another tenant's)
    ├── ConflictError             409
    │   ├── IdempotencyInProgressError   idempotency_key_in_progress (retry_after_s)
    │   └── NotDeadLetteredError         job_not_dead_lettered
    ├── PayloadTooLargeError      413
    ├── UnprocessableEntityError  422
    │   └── IdempotencyKeyReusedError    idempotency_key_reused
    ├── RateLimitError            429 (retry_after_s)
    └── InternalServerError       5xx
        └── ServiceUnavailableError      503 (retry_after_s)
"""

from __future__ import annotations

from typing import Any

from jobgate.client.models import Job


class ClientError(Exception):
    """Base of every error the jobgate client raises."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class CredentialsError(ClientError):
    """No API key: pass one, set JOBGATE_API_KEY, or run `jobgate serve` once on this host."""


class APIConnectionError(ClientError):
    """The request got no answer. When `outcome_unknown` is True it may have reached the server
    (the connection broke after sending), so only an idempotent request may be repeated."""

    def __init__(self, message: str, *, outcome_unknown: bool) -> None:
        super().__init__(message)
        self.outcome_unknown = outcome_unknown


class APITimeoutError(APIConnectionError):
    """The server did not answer in time."""


class WaitTimeout(ClientError):
    """`wait()` ran out of time before the job finished; `job` is the last state seen."""

    def __init__(self, job_id: str, timeout_s: float, job: Job | None) -> None:
        status = job.status if job is not None else "unknown"
        super().__init__(f"job {job_id} still {status} after {timeout_s:g}s")
        self.job_id = job_id
        self.timeout_s = timeout_s
        self.job = job


class APIStatusError(ClientError):
    """The server answered with an RFC 9457 problem. `code` is the stable identifier to
    branch on (`not_found`, `queue_full`, …); `retry_after_s` is set when the server said when
    to come back."""

    def __init__(
        self,
        message: str,
        *,
        status: int,
        code: str,
        type: str,
        title: str,
        param: str | None = None,
        retry_after_s: float | None = None,
        body: Any = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.type = type
        self.title = title
        self.param = param
        self.retry_after_s = retry_after_s
        self.body = body

    def __str__(self) -> str:
        return f"{self.message} ({self.status} {self.code})"


class BadRequestError(APIStatusError):
    pass


class AuthenticationError(APIStatusError):
    pass


class PermissionDeniedError(APIStatusError):
    pass


class NotFoundError(APIStatusError):
    pass


class ConflictError(APIStatusError):
    pass


class IdempotencyInProgressError(ConflictError):
    pass


class NotDeadLetteredError(ConflictError):
    pass


class PayloadTooLargeError(APIStatusError):
    pass


class UnprocessableEntityError(APIStatusError):
    pass


class IdempotencyKeyReusedError(UnprocessableEntityError):
    pass


class RateLimitError(APIStatusError):
    pass


class InternalServerError(APIStatusError):
    pass


class ServiceUnavailableError(InternalServerError):
    pass


BY_CODE: dict[str, type[APIStatusError]] = {
    "idempotency_key_in_progress": IdempotencyInProgressError,
    "job_not_dead_lettered": NotDeadLetteredError,
    "idempotency_key_reused": IdempotencyKeyReusedError,
    "invalid_api_key": AuthenticationError,
    "not_found": NotFoundError,
    "payload_too_large": PayloadTooLargeError,
    "queue_full": RateLimitError,
    "storage_unavailable": ServiceUnavailableError,
}
BY_STATUS: dict[int, type[APIStatusError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLargeError,
    422: UnprocessableEntityError,
    429: RateLimitError,
    503: ServiceUnavailableError,
}


def error_class(status: int, code: str) -> type[APIStatusError]:
    """The most specific class for a problem: by code, else by status, else by status class."""
    by_code = BY_CODE.get(code)
    if by_code is not None:
        return by_code
    by_status = BY_STATUS.get(status)
    if by_status is not None:
        return by_status
    return InternalServerError if status >= 500 else APIStatusError
