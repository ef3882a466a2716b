"""Prometheus metric objects, registered on the default registry (served by the /metrics route).

Labels are low-cardinality by design: never a tenant, endpoint or job id.
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

WEBHOOK_ATTEMPTS = Counter(
    "jobgate_webhook_attempts",
    "Webhook delivery attempts, by outcome (succeeded, failed, refused, timeout, error)",
    ["outcome"],
)
WEBHOOK_DELIVERIES_SUCCEEDED = Counter(
    "jobgate_webhook_deliveries_succeeded",
    "Webhook deliveries that a receiver accepted (2xx)",
)
WEBHOOK_DELIVERIES_FAILED = Counter(
    "jobgate_webhook_deliveries_failed",
    "Webhook deliveries given up (schedule spent, 410 Gone, endpoint disabled or deleted, "
    "URL refused for good)",
    ["reason"],
)
WEBHOOK_ATTEMPT_SECONDS = Histogram(
    "jobgate_webhook_attempt_seconds",
    "Time from resolving a webhook URL to the receiver's answer",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15),
)
