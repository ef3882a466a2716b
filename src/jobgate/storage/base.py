"""What the two SQL backends share beyond SQL: the entry points of the lease holder's
transactions (submit, claim, finish, reap), which call the dialect's side of the seam
(storage.transactions) once per call and publish what they committed to this process's wake-up
hub, and a bulk filter's parameters."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

from jobgate.domain.bulk import BulkAction, JobFilter
from jobgate.domain.job import Job, NewJob
from jobgate.domain.states import JobState
from jobgate.domain.verdicts import POISON_JOB, Finish, Poisoning, RetryDelay
from jobgate.storage.executor import Codec, SqlPart
from jobgate.storage.records import (
    ClaimPolicy,
    ClaimRequest,
    Finished,
    IdempotencyClaim,
    Inserted,
    QueueLimit,
    ReapResult,
)
from jobgate.storage.transaction_requests import FinishRequest, InsertRequest, ReapRequest
from jobgate.wakeups import ChangeHub


def publish_finished(changes: ChangeHub, finished: Sequence[Finished | None]) -> None:
    """Wake this process's waiters after a commit (other processes hear NOTIFY, on
    PostgreSQL; on SQLite they poll)."""
    changed = [done for done in finished if done is not None]
    if changed:
        changes.jobs_changed(done.job_id for done in changed)
        if any(done.state is JobState.QUEUED for done in changed):
            changes.work_available()
        changes.outbox_available()


def reap_result(
    finished: Sequence[Finished | None],
    verdicts: Sequence[Finish] = (),
    poisonings: Sequence[Poisoning] = (),
) -> ReapResult:
    """What a reap pass did; `poisonings` are the jobs it judged poison, for the reaper's log."""
    result = ReapResult(poisonings=list(poisonings))
    poisoned = {v.lease.job_id for v in verdicts if v.reason == POISON_JOB}
    for done in finished:
        if done is None:
            continue
        if done.job_id in poisoned:
            result.poisoned.append(done.job_id)
        if done.state is JobState.QUEUED:
            result.requeued.append(done.job_id)
        elif done.state is JobState.CANCELLED:
            result.cancelled.append(done.job_id)
        else:
            result.failed.append(done.job_id)
    return result


def finish_payload(finish: Finish, codec: Codec) -> dict[str, Any]:
    """One verdict as an element of job_finish's JSON array. A field at its default (None,
    0, false) is left out: job_finish reads a missing field as that default, and PostgreSQL
    parses every byte of the array (a success's verdict is ~15 % smaller without them)."""
    payload: dict[str, Any] = {
        "id": finish.lease.job_id,
        "token": finish.lease.token,
        "state": str(finish.state),
        "actor": finish.actor,
        "reason": finish.reason,
    }
    if finish.result is not None:
        payload["result"] = codec.json(finish.result)
    if finish.error is not None:
        payload["error"] = codec.json(finish.error)
    if finish.usage is not None:
        payload["usage"] = codec.json(finish.usage)
    if not finish.count_attempt:
        payload["refund_attempt"] = 1
    if finish.lost:
        payload["lost"] = 1
    if finish.dead_lettered:
        payload["dead_lettered"] = codec.flag(True)
    if finish.retry_in_s:
        payload["retry_in_s"] = finish.retry_in_s
    if finish.cancel_outcome is not None:
        payload["cancel_outcome"] = finish.cancel_outcome
    if finish.creation_outcome is not None:
        payload["creation_outcome"] = finish.creation_outcome
    if finish.provider_request_id is not None:
        payload["provider_request_id"] = finish.provider_request_id
    return payload


class SqlStorageBase(SqlPart):
    async def ping(self) -> None:
        await self._sql.read("ping")

    # -- the entry points, which publish what they committed -------------------------------

    async def job_insert(
        self,
        *,
        chunks: Iterable[Sequence[NewJob]],
        keys: Sequence[IdempotencyClaim | None] | None = None,
        queue_limit: QueueLimit | None = None,
        now: datetime | None = None,
    ) -> Inserted:
        inserted = await self._tx.insert(InsertRequest(chunks, keys, queue_limit, now))
        if inserted.jobs:
            self.changes.work_available()
        return inserted

    async def job_claim(
        self,
        *,
        worker_id: str,
        limit: int,
        lease_ttl_s: float,
        providers: Sequence[str] | None = None,
        policy: ClaimPolicy | None = None,
        now: datetime | None = None,
        models: Sequence[str] | None = None,
        skip_models: Sequence[str] | None = None,
    ) -> list[Job]:
        rules = policy or ClaimPolicy()
        lists = [
            None if names is None else list(names) for names in (providers, models, skip_models)
        ]
        claim = ClaimRequest(worker_id, limit, lease_ttl_s, rules, now, *lists)
        claimed = await self._tx.claim(claim)
        if claimed:
            self.changes.jobs_changed(job.id for job in claimed)
        return claimed

    async def job_finish_many(
        self, *, finishes: Sequence[Finish], now: datetime | None = None
    ) -> list[Finished | None]:
        if not finishes:
            return []
        results = await self._tx.finish_many(FinishRequest(finishes, now))
        publish_finished(self.changes, results)
        return results

    async def job_reap_expired(
        self, *, limit: int, retry_delay: RetryDelay, now: datetime | None = None
    ) -> ReapResult:
        reaped = await self._tx.reap(ReapRequest(limit, retry_delay, now))
        publish_finished(self.changes, reaped.finished)
        return reap_result(reaped.finished, reaped.verdicts, reaped.poisonings)


def bulk_filter_params(
    where: JobFilter,
    action: BulkAction,
    *,
    time: Callable[[datetime | None], Any],
    json: Callable[[Any], Any],
) -> dict[str, Any]:
    """A bulk filter's named parameters; each dialect says how times and JSON travel."""
    return {
        "tenant_id": where.tenant_id,
        "states": None if where.states is None else json([str(s) for s in where.states]),
        "provider": where.provider,
        "model": where.model,
        "error_code": where.error_code,
        "created_after": time(where.created_after),
        "created_before": time(where.created_before),
        "metadata": None if where.metadata is None else json(dict(where.metadata)),
        "dead_lettered": where.dead_lettered,
        "action": str(action),
    }
