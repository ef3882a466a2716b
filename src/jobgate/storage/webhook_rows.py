"""Turning webhook rows into records, for either dialect (given how it stores times and JSON)."""

from __future__ import annotations

from jobgate.storage.rows import JsonDecoder, RowDecoder, RowLike, TimeDecoder
from jobgate.storage.webhook_records import (
    ENDPOINT_ACTIVE,
    ENDPOINT_DISABLED,
    ENDPOINT_MISSING,
    Delivery,
    DeliveryAttempt,
    WebhookEndpoint,
)


class WebhookRowDecoder:
    def __init__(self, *, time: TimeDecoder, json: JsonDecoder) -> None:
        self._time = time
        self._json = json
        self._core = RowDecoder(time=time, json=json)

    def endpoint(self, row: RowLike) -> WebhookEndpoint:
        created_at = self._time(row["created_at"])
        updated_at = self._time(row["updated_at"])
        if created_at is None or updated_at is None:
            raise ValueError("a required time column is NULL")
        return WebhookEndpoint(
            id=row["id"],
            tenant_id=row["tenant_id"],
            url=row["url"],
            description=row["description"],
            event_types=tuple(self._json(row["event_types"]) or ()),
            include_result=bool(row["include_result"]),
            disabled=bool(row["disabled"]),
            disabled_reason=row["disabled_reason"],
            secret=row["secret"],
            previous_secret=row["previous_secret"],
            previous_secret_expires_at=self._time(row["previous_secret_expires_at"]),
            created_at=created_at,
            updated_at=updated_at,
        )

    def delivery(self, row: RowLike) -> Delivery:
        """A claimed outbox row joined with its endpoint (e_*) and tenant (tenant_secret)."""
        entry = self._core.outbox(row)
        url: str | None
        secrets: tuple[str, ...]
        if entry.endpoint_id is None:  # the job's own URL, signed with the tenant's secret
            url, secrets, include_result = entry.url, (row["tenant_secret"],), False
            state = ENDPOINT_ACTIVE
        elif row["e_url"] is None:
            url, secrets, include_result, state = None, (), False, ENDPOINT_MISSING
        else:
            url = row["e_url"]
            secrets = tuple(s for s in (row["e_secret"], row["e_previous_secret"]) if s)
            include_result = bool(row["e_include_result"])
            state = ENDPOINT_DISABLED if row["e_disabled"] else ENDPOINT_ACTIVE
        return Delivery(
            entry=entry,
            lease_token=row["lease_token"],
            url=url,
            secrets=secrets,
            include_result=include_result,
            endpoint_state=state,
        )

    def attempt(self, row: RowLike) -> DeliveryAttempt:
        created_at = self._time(row["created_at"])
        if created_at is None:
            raise ValueError("a required time column is NULL")
        return DeliveryAttempt(
            id=row["id"],
            outbox_id=row["outbox_id"],
            event_id=row["event_id"],
            job_id=row["job_id"],
            target=row["target"],
            attempt=row["attempt"],
            status_code=row["status_code"],
            latency_ms=row["latency_ms"],
            error=row["error"],
            succeeded=bool(row["succeeded"]),
            created_at=created_at,
        )
