"""The webhook store on SQLite (a mixin of SqliteStorage): endpoints and leased deliveries."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import orjson

from jobgate.storage import rows, sql
from jobgate.storage.records import (
    Delivery,
    DeliveryAttempt,
    DeliveryOutcome,
    EndpointChanges,
    NewWebhookEndpoint,
    WebhookEndpoint,
)
from jobgate.storage.rows import WebhookRowDecoder

if TYPE_CHECKING:
    from jobgate.storage.changes import ChangeHub
    from jobgate.storage.sqlite.database import SqliteDatabase

Q = sql.load("jobgate.storage.sqlite")


def _time_out(value: Any) -> datetime | None:
    return rows.unix_time(value)  # clamped: a stored time never stops a delivery claim


_loads = rows.tolerant_json(orjson.loads)


def _json_out(value: Any) -> Any:
    return None if value is None else _loads(value)


def _flag(value: bool | None) -> int | None:
    return None if value is None else int(value)


_decode = WebhookRowDecoder(time=_time_out, json=_json_out)


class SqliteWebhookStore:
    if TYPE_CHECKING:
        changes: ChangeHub
        _db: SqliteDatabase

        def _now(self, now: datetime | None) -> float: ...

    async def webhook_endpoint_create(
        self, *, endpoint: NewWebhookEndpoint, now: datetime | None = None
    ) -> WebhookEndpoint:
        params = {
            "id": endpoint.id,
            "tenant_id": endpoint.tenant_id,
            "url": endpoint.url,
            "description": endpoint.description,
            "event_types": orjson.dumps(list(endpoint.event_types)).decode(),
            "include_result": int(endpoint.include_result),
            "disabled": int(endpoint.disabled),
            "secret": endpoint.secret,
            "now": self._now(now),
        }
        row = await self._db.write(
            lambda conn: conn.execute(Q["webhook_endpoint_insert"].sql, params).fetchone()
        )
        return _decode.endpoint(row)

    async def webhook_endpoint_get(
        self, *, endpoint_id: str, tenant_id: str | None = None
    ) -> WebhookEndpoint | None:
        if tenant_id is None:
            query, params = Q["webhook_endpoint_get"].sql, {"id": endpoint_id}
        else:
            query = Q["webhook_endpoint_get_for_tenant"].sql
            params = {"id": endpoint_id, "tenant_id": tenant_id}
        row = await self._db.read(lambda conn: conn.execute(query, params).fetchone())
        return None if row is None else _decode.endpoint(row)

    async def webhook_endpoint_list(
        self, *, tenant_id: str, after: str | None = None, limit: int = 20
    ) -> list[WebhookEndpoint]:
        def read(conn: sqlite3.Connection) -> list[WebhookEndpoint]:
            after_created_at = after_id = None
            if after is not None:
                anchor = conn.execute(
                    Q["webhook_endpoint_get_for_tenant"].sql, {"id": after, "tenant_id": tenant_id}
                ).fetchone()
                if anchor is not None:
                    after_created_at, after_id = anchor["created_at"], anchor["id"]
                else:
                    return []
            rows = conn.execute(
                Q["webhook_endpoint_list"].sql,
                {
                    "tenant_id": tenant_id,
                    "after_created_at": after_created_at,
                    "after_id": after_id,
                    "limit": limit,
                },
            ).fetchall()
            return [_decode.endpoint(row) for row in rows]

        return await self._db.read(read)

    async def webhook_endpoint_update(
        self,
        *,
        endpoint_id: str,
        tenant_id: str,
        changes: EndpointChanges,
        now: datetime | None = None,
    ) -> WebhookEndpoint | None:
        params = {
            "id": endpoint_id,
            "tenant_id": tenant_id,
            "url": changes.url,
            "description": changes.description,
            "event_types": None
            if changes.event_types is None
            else orjson.dumps(list(changes.event_types)).decode(),
            "include_result": _flag(changes.include_result),
            "disabled": _flag(changes.disabled),
            "now": self._now(now),
        }
        row = await self._db.write(
            lambda conn: conn.execute(Q["webhook_endpoint_update"].sql, params).fetchone()
        )
        return None if row is None else _decode.endpoint(row)

    async def webhook_endpoint_delete(
        self, *, endpoint_id: str, tenant_id: str, now: datetime | None = None
    ) -> bool:
        at = self._now(now)

        def delete(conn: sqlite3.Connection) -> bool:
            params = {"id": endpoint_id, "tenant_id": tenant_id}
            if conn.execute(Q["webhook_endpoint_delete"].sql, params).fetchone() is None:
                return False
            conn.execute(
                Q["outbox_fail_for_endpoint"].sql,
                {"endpoint_id": endpoint_id, "error": "endpoint deleted", "now": at},
            )
            return True

        return await self._db.write(delete)

    async def webhook_endpoint_rotate_secret(
        self,
        *,
        endpoint_id: str,
        tenant_id: str,
        secret: str,
        grace_s: float,
        now: datetime | None = None,
    ) -> WebhookEndpoint | None:
        params = {
            "id": endpoint_id,
            "tenant_id": tenant_id,
            "secret": secret,
            "grace_s": grace_s,
            "now": self._now(now),
        }
        row = await self._db.write(
            lambda conn: conn.execute(Q["webhook_endpoint_rotate"].sql, params).fetchone()
        )
        return None if row is None else _decode.endpoint(row)

    async def delivery_claim_due(
        self,
        *,
        limit: int,
        lease_s: float,
        busy: Sequence[str] = (),
        now: datetime | None = None,
    ) -> list[Delivery]:
        at = self._now(now)

        def claim(conn: sqlite3.Connection) -> list[Delivery]:
            claimed = conn.execute(
                Q["delivery_claim"].sql,
                {
                    "now": at,
                    "lease_s": lease_s,
                    "limit": limit,
                    "busy": orjson.dumps(list(busy)).decode(),
                },
            ).fetchall()
            if not claimed:
                return []
            ids = orjson.dumps([row["id"] for row in claimed]).decode()
            rows = conn.execute(Q["delivery_claimed"].sql, {"ids": ids, "now": at}).fetchall()
            return [_decode.delivery(row) for row in rows]

        return await self._db.write(claim)

    async def delivery_record(
        self, *, delivery: Delivery, outcome: DeliveryOutcome, now: datetime | None = None
    ) -> bool:
        at = self._now(now)
        entry = delivery.entry

        def record(conn: sqlite3.Connection) -> bool:
            if outcome.attempted:
                conn.execute(
                    Q["delivery_attempt_insert"].sql,
                    {
                        "outbox_id": entry.id,
                        "event_id": entry.event_id,
                        "tenant_id": entry.tenant_id,
                        "job_id": entry.job_id,
                        "target": entry.target,
                        "attempt": entry.attempts,
                        "status_code": outcome.status_code,
                        "latency_ms": outcome.latency_ms,
                        "error": outcome.error,
                        "succeeded": int(outcome.state == "succeeded"),
                        "now": at,
                    },
                )
            if outcome.disable_endpoint is not None and entry.endpoint_id is not None:
                conn.execute(
                    Q["webhook_endpoint_disable"].sql,
                    {"id": entry.endpoint_id, "reason": outcome.disable_endpoint, "now": at},
                )
            updated = conn.execute(
                Q["delivery_update"].sql,
                {
                    "id": entry.id,
                    "token": delivery.lease_token,
                    "state": outcome.state,
                    "retry_in_s": outcome.retry_in_s,
                    "attempted": int(outcome.attempted),
                    "status_code": outcome.status_code,
                    "error": outcome.error,
                    "now": at,
                },
            ).fetchone()
            return updated is not None

        return await self._db.write(record)

    async def delivery_release(
        self, *, delivery: Delivery, delay_s: float = 0.0, now: datetime | None = None
    ) -> bool:
        params = {
            "id": delivery.entry.id,
            "token": delivery.lease_token,
            "delay_s": delay_s,
            "now": self._now(now),
        }
        row = await self._db.write(
            lambda conn: conn.execute(Q["delivery_release"].sql, params).fetchone()
        )
        if row is not None:
            self.changes.outbox_available()
        return row is not None

    async def delivery_recover(
        self, *, endpoint_id: str, tenant_id: str, since: datetime, now: datetime | None = None
    ) -> int:
        params = {
            "endpoint_id": endpoint_id,
            "tenant_id": tenant_id,
            "since": since.timestamp(),
            "now": self._now(now),
        }
        rows = await self._db.write(
            lambda conn: conn.execute(Q["delivery_recover"].sql, params).fetchall()
        )
        if rows:
            self.changes.outbox_available()
        return len(rows)

    async def delivery_attempts_for_job(self, *, job_id: str) -> list[DeliveryAttempt]:
        rows = await self._db.read(
            lambda conn: conn.execute(
                Q["delivery_attempts_for_job"].sql, {"job_id": job_id}
            ).fetchall()
        )
        return [_decode.attempt(row) for row in rows]
