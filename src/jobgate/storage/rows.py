"""Turning database rows into records; each dialect supplies how it stores times and JSON."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol

from jobgate.domain.job import Job, JobEvent
from jobgate.domain.states import JobState
from jobgate.storage.records import ApiKey, OutboxEntry, Tenant, UsageEntry
from jobgate.storage.schedule_records import Schedule


class RowLike(Protocol):
    """A sqlite3.Row, an asyncpg.Record or a dict: anything indexable by column name."""

    def __getitem__(self, key: str, /) -> Any: ...


TimeDecoder = Callable[[Any], datetime | None]
JsonDecoder = Callable[[Any], Any]


class RowDecoder:
    def __init__(self, *, time: TimeDecoder, json: JsonDecoder) -> None:
        self._time = time
        self._json = json

    def _required_time(self, value: Any) -> datetime:
        moment = self._time(value)
        if moment is None:
            raise ValueError("a required time column is NULL")
        return moment

    def job(self, row: RowLike) -> Job:
        t = self._time
        j = self._json
        return Job(
            id=row["id"],
            tenant_id=row["tenant_id"],
            state=JobState(row["state"]),
            api=row["api"],
            provider=row["provider"],
            endpoint=row["endpoint"],
            model=row["model"],
            request=j(row["request"]),
            metadata=j(row["metadata"]) or {},
            webhook=j(row["webhook"]),
            result=j(row["result"]),
            error=j(row["error"]),
            usage=j(row["usage"]),
            priority=row["priority"],
            attempt=row["attempt"],
            max_attempts=row["max_attempts"],
            run_count=row["run_count"],
            lost_count=row["lost_count"],
            run_at=self._required_time(row["run_at"]),
            created_at=self._required_time(row["created_at"]),
            updated_at=self._required_time(row["updated_at"]),
            started_at=t(row["started_at"]),
            completed_at=t(row["completed_at"]),
            cancel_requested_at=t(row["cancel_requested_at"]),
            expires_at=t(row["expires_at"]),
            execution_timeout_s=row["execution_timeout_s"],
            deadline_at=t(row["deadline_at"]),
            lease_owner=row["lease_owner"],
            lease_token=row["lease_token"],
            lease_expires_at=t(row["lease_expires_at"]),
            phase=row["phase"],
            provider_job_id=row["provider_job_id"],
            creation_outcome=row["creation_outcome"],
            cancel_outcome=row["cancel_outcome"],
            reconcile_at=t(row["reconcile_at"]),
            dead_lettered=bool(row["dead_lettered"]),
            purged_at=t(row["purged_at"]),
            event_seq=row["event_seq"],
            provider_generation=row["provider_generation"],
            concurrency_key=row["concurrency_key"],
            model_route=row["model_route"],
            reconciled_at=t(row["reconciled_at"]),
            progress=row["progress"],
        )

    def schedule(self, row: RowLike) -> Schedule:
        return Schedule(
            id=row["id"],
            tenant_id=row["tenant_id"],
            cron=row["cron"],
            template=self._json(row["template"]),
            paused=bool(row["paused"]),
            next_run_at=self._required_time(row["next_run_at"]),
            created_at=self._required_time(row["created_at"]),
        )

    def event(self, row: RowLike) -> JobEvent:
        return JobEvent(
            job_id=row["job_id"],
            seq=row["seq"],
            from_state=JobState(row["from_state"]) if row["from_state"] else None,
            to_state=JobState(row["to_state"]),
            actor=row["actor"],
            reason=row["reason"],
            applied=bool(row["applied"]),
            created_at=self._required_time(row["created_at"]),
        )

    def tenant(self, row: RowLike) -> Tenant:
        return Tenant(
            id=row["id"],
            name=row["name"],
            webhook_secret=row["webhook_secret"],
            created_at=self._required_time(row["created_at"]),
        )

    def api_key(self, row: RowLike) -> ApiKey:
        return ApiKey(
            id=row["id"],
            tenant_id=row["tenant_id"],
            key_prefix=row["key_prefix"],
            created_at=self._required_time(row["created_at"]),
            revoked_at=self._time(row["revoked_at"]),
        )

    def usage(self, row: RowLike) -> UsageEntry:
        return UsageEntry(
            job_id=row["job_id"],
            kind=row["kind"],
            tenant_id=row["tenant_id"],
            provider=row["provider"],
            model=row["model"],
            input_tokens=row["input_tokens"],
            output_tokens=row["output_tokens"],
            created_at=self._required_time(row["created_at"]),
        )

    def outbox(self, row: RowLike) -> OutboxEntry:
        return OutboxEntry(
            id=row["id"],
            event_id=row["event_id"],
            tenant_id=row["tenant_id"],
            job_id=row["job_id"],
            event_type=row["event_type"],
            target=row["target"],
            endpoint_id=row["endpoint_id"],
            url=row["url"],
            series=row["series"],
            job_status=row["job_status"],
            created_at=self._required_time(row["created_at"]),
            state=row["state"],
            attempts=row["attempts"],
            next_attempt_at=self._required_time(row["next_attempt_at"]),
            last_status_code=row["last_status_code"],
            last_error=row["last_error"],
            completed_at=self._time(row["completed_at"]),
        )
