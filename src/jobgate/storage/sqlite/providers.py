"""The provider store on SQLite (see storage.providers_protocol)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import orjson

from jobgate import errors
from jobgate.clock import Clock
from jobgate.domain.job import Job, JSONObject, Lease
from jobgate.domain.states import JobState
from jobgate.storage import shared, sql
from jobgate.storage.changes import ChangeHub
from jobgate.storage.records import (
    BackgroundJob,
    ProviderEventOutcome,
    ReconcileDeferral,
    Settlement,
)
from jobgate.storage.rows import RowDecoder, RowLike, unix_time
from jobgate.storage.sqlite.database import SqliteDatabase

Q = sql.load("jobgate.storage.sqlite")


def _json(value: Any) -> str | None:
    return None if value is None else orjson.dumps(value).decode()


def _time(value: Any) -> datetime | None:
    return unix_time(value)  # clamped: a stored time never stops a reconcile claim


def _error_out(value: Any) -> Any:
    """The last failed check, as recorded; unreadable JSON reads as none (it only informs)."""
    if value is None:
        return None
    try:
        return orjson.loads(value)
    except ValueError:
        return None


class SqliteProviderStore:
    """Mixed into SqliteStorage, whose connection, decoder, clock and change hub it uses."""

    _db: SqliteDatabase
    _decode: RowDecoder
    _clock: Clock
    changes: ChangeHub

    def _at(self, now: datetime | None) -> float:
        return (now or self._clock.now()).timestamp()

    def _background(self, row: RowLike, *, claimed: bool = False) -> BackgroundJob:
        error = row["reconcile_error"]
        return BackgroundJob(
            job=self._decode.job(row),
            provider_status=row["provider_status"],
            reconciled_at=_time(row["reconciled_at"]),
            reconcile_checks=row["reconcile_checks"],
            reconcile_failures=row["reconcile_failures"],
            reconcile_error=_error_out(error),
            cancel_sent_at=_time(row["cancel_sent_at"]),
            checked_at=_time(row["checked_at"]) if claimed else None,
            overdue=bool(row["overdue"]) if claimed else False,
        )

    async def job_provider_submitting(self, *, lease: Lease, now: datetime | None = None) -> None:
        params = {"id": lease.job_id, "token": lease.token, "now": self._at(now)}
        row = await self._db.write(
            lambda conn: conn.execute(Q["job_provider_submitting"].sql, params).fetchone()
        )
        if row is None:
            raise errors.LeaseLost(lease.job_id)

    async def job_background_accept(
        self,
        *,
        lease: Lease,
        provider_job_id: str,
        provider_status: str | None,
        reconcile_in_s: float,
        now: datetime | None = None,
    ) -> Job:
        at = self._at(now)
        params = {
            "id": lease.job_id,
            "token": lease.token,
            "provider_job_id": provider_job_id,
            "provider_status": provider_status,
            "reconcile_in_s": reconcile_in_s,
            "now": at,
        }
        row = await self._db.write(
            lambda conn: conn.execute(Q["job_background_accept"].sql, params).fetchone()
        )
        if row is None:
            raise errors.LeaseLost(lease.job_id)
        job = self._decode.job(row)
        if job.reconcile_at is not None and job.reconcile_at.timestamp() <= at:
            self.changes.reconcile_due()
        return job

    async def job_reconcile_refresh(
        self, *, providers: Sequence[str] | None = None, now: datetime | None = None
    ) -> int:
        params = {
            "providers": _json(None if providers is None else list(providers)),
            "now": self._at(now),
        }
        rows = await self._db.write(
            lambda conn: conn.execute(Q["job_reconcile_refresh"].sql, params).fetchall()
        )
        return len(rows)

    async def job_reconcile_claim(
        self,
        *,
        limit: int,
        lease_s: float,
        providers: Sequence[str] | None = None,
        now: datetime | None = None,
    ) -> list[BackgroundJob]:
        params = {
            "limit": limit,
            "lease_s": lease_s,
            "providers": _json(None if providers is None else list(providers)),
            "now": self._at(now),
        }
        rows = await self._db.write(
            lambda conn: conn.execute(Q["job_reconcile_claim"].sql, params).fetchall()
        )
        claimed = [self._background(row, claimed=True) for row in rows]
        return sorted(claimed, key=lambda item: (item.job.created_at, item.job.id))

    async def job_reconcile_defer(
        self, *, deferral: ReconcileDeferral, now: datetime | None = None
    ) -> bool:
        params = {
            "id": deferral.job_id,
            "provider_job_id": deferral.provider_job_id,
            "reconcile_in_s": deferral.reconcile_in_s,
            "provider_status": deferral.provider_status,
            "failure": _json(deferral.failure),
            "cancel_sent": int(deferral.cancel_sent),
            "progress": deferral.progress,
            "now": self._at(now),
        }
        row = await self._db.write(
            lambda conn: conn.execute(Q["job_reconcile_defer"].sql, params).fetchone()
        )
        return row is not None

    async def job_settle(
        self, *, settlement: Settlement, now: datetime | None = None
    ) -> Job | None:
        at = self._at(now)
        s = settlement
        params = {
            "id": s.job_id,
            "provider_job_id": s.provider_job_id,
            "state": str(s.state),
            "result": _json(s.result),
            "error": _json(s.error),
            "usage": _json(s.usage),
            "refund_attempt": 0 if s.count_attempt else 1,
            "dead_lettered": int(s.dead_lettered),
            "retry_in_s": s.retry_in_s,
            "cancel_outcome": s.cancel_outcome,
            "provider_status": s.provider_status,
            "watch_in_s": s.watch_in_s,
            "actor": s.actor,
            "reason": s.reason,
            "now": at,
        }

        def settle(conn: sqlite3.Connection) -> Job | None:
            row = conn.execute(Q["job_settle"].sql, params).fetchone()
            if row is None:
                return None
            job = self._decode.job(row)
            if s.usage and job.terminal:
                _bill(conn, job, "completion", s.usage, at)
            return job

        job = await self._db.write(settle)
        if job is not None:
            self.changes.jobs_changed([job.id])
            self.changes.outbox_available()
            if job.state is JobState.QUEUED:
                self.changes.work_available()
        return job

    async def job_discard_late_result(
        self,
        *,
        job_id: str,
        provider_job_id: str,
        to_state: JobState,
        usage: JSONObject | None,
        actor: str,
        now: datetime | None = None,
    ) -> bool:
        at = self._at(now)

        def discard(conn: sqlite3.Connection) -> bool:
            row = conn.execute(
                Q["job_stop_watching"].sql,
                {
                    "id": job_id,
                    "provider_job_id": provider_job_id,
                    "provider_status": str(to_state),
                    "now": at,
                },
            ).fetchone()
            if row is None:
                return False
            job = self._decode.job(row)
            seq = conn.execute(Q["job_bump_seq"].sql, {"id": job_id}).fetchone()
            conn.execute(
                Q["job_event_insert"].sql,
                {
                    "job_id": job_id,
                    "seq": seq["event_seq"],
                    "from_state": str(job.state),
                    "to_state": str(to_state),
                    "actor": actor,
                    "reason": "result_discarded_after_cancel",
                    "applied": 0,
                    "now": at,
                },
            )
            if usage:
                _bill(conn, job, "completion", usage, at)
                _bill(conn, job, "refund", usage, at)
            return True

        return await self._db.write(discard)

    async def job_by_provider_job(
        self, *, provider: str, provider_job_id: str
    ) -> BackgroundJob | None:
        params = {"provider": provider, "provider_job_id": provider_job_id}
        row = await self._db.read(
            lambda conn: conn.execute(Q["job_by_provider_job"].sql, params).fetchone()
        )
        return None if row is None else self._background(row)

    async def provider_event_record(
        self,
        *,
        provider: str,
        event_id: str,
        event_type: str,
        provider_job_id: str | None,
        now: datetime | None = None,
    ) -> ProviderEventOutcome:
        params = {
            "provider": provider,
            "event_id": event_id,
            "event_type": event_type,
            "provider_job_id": provider_job_id,
            "now": self._at(now),
        }

        def record(conn: sqlite3.Connection) -> tuple[bool, Job | None, bool]:
            inserted = conn.execute(Q["provider_event_insert"].sql, params).fetchone()
            if provider_job_id is None:
                return inserted is None, None, False
            due = False
            if inserted is not None:
                due = conn.execute(Q["job_reconcile_now"].sql, params).fetchone() is not None
            row = conn.execute(Q["job_by_provider_job"].sql, params).fetchone()
            return inserted is None, None if row is None else self._decode.job(row), due

        duplicate, job, due = await self._db.write(record)
        if due:
            self.changes.reconcile_due()
        return ProviderEventOutcome(duplicate=duplicate, job=job)

    async def provider_events_prune(self, *, before: datetime) -> int:
        params = {"before": before.timestamp()}
        rows = await self._db.write(
            lambda conn: conn.execute(Q["provider_events_prune"].sql, params).fetchall()
        )
        return len(rows)


def _bill(conn: sqlite3.Connection, job: Job, kind: str, usage: JSONObject, at: float) -> None:
    conn.execute(
        Q["usage_record"].sql,
        {
            "job_id": job.id,
            "kind": kind,
            "tenant_id": job.tenant_id,
            "provider": job.provider,
            "model": job.model,
            "input_tokens": int(usage.get("input_tokens") or 0),
            "output_tokens": int(usage.get("output_tokens") or 0),
            **shared.cache_tokens(usage),
            "now": at,
        },
    )
