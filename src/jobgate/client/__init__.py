"""The jobgate client SDK: `Client` and `AsyncClient` over the native API (httpx only; it never
imports server code, so it can ship on its own).

    from jobgate.client import Client

    with Client() as client:  # JOBGATE_URL / JOBGATE_API_KEY, or the key `jobgate serve` saved
        job = client.submit("/v1/chat/completions", {"model": "sim-echo", "messages": [...]})
        job = client.wait(job.id, timeout_s=60)
"""

from jobgate.client._async import AsyncClient
from jobgate.client._sync import Client
from jobgate.client.errors import (
    APIConnectionError,
    APIStatusError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    ClientError,
    ConflictError,
    CredentialsError,
    IdempotencyInProgressError,
    IdempotencyKeyReusedError,
    InternalServerError,
    NotDeadLetteredError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    RateLimitError,
    ServiceUnavailableError,
    UnprocessableEntityError,
    WaitTimeout,
)
from jobgate.client.journal import Journal, Operation, new_operation_id
from jobgate.client.models import (
    TERMINAL_STATUSES,
    EventPage,
    Job,
    JobError,
    JobEvent,
    JobPage,
    JobStatus,
    JobToken,
    JobWaiting,
    OutputDelta,
)
from jobgate.client.webhooks import WebhookVerificationError, verify_webhook

__all__ = [
    "TERMINAL_STATUSES",
    "APIConnectionError",
    "APIStatusError",
    "APITimeoutError",
    "AsyncClient",
    "AuthenticationError",
    "BadRequestError",
    "Client",
    "ClientError",
    "ConflictError",
    "CredentialsError",
    "EventPage",
    "IdempotencyInProgressError",
    "IdempotencyKeyReusedError",
    "InternalServerError",
    "Job",
    "JobError",
    "JobEvent",
    "JobPage",
    "JobStatus",
    "JobToken",
    "JobWaiting",
    "Journal",
    "NotDeadLetteredError",
    "NotFoundError",
    "Operation",
    "OutputDelta",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "RateLimitError",
    "ServiceUnavailableError",
    "UnprocessableEntityError",
    "WaitTimeout",
    "WebhookVerificationError",
    "new_operation_id",
    "verify_webhook",
]
