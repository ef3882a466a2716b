"""Native bulk submission: many submits in one transaction, each answered in its own slot."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from jobgate import errors
from jobgate.domain import frozen, idempotency
from jobgate.domain.job import NewJob
from jobgate.domain.states import JobState
from jobgate.services.jobs import SUBMIT_ROUTE, JobService, SubmitSpec, chunk_spans
from jobgate.services.limits import Admission
from jobgate.storage.records import BulkItem, IdempotencyClaim, SubmitOutcome

log = logging.getLogger(__name__)

MAX_BULK_ITEMS = 1000


@frozen.record  # one per item of a bulk call
class SubmitManyItem:
    """One item of a bulk call: a validated submit, or the refusal its validation raised."""

    spec: SubmitSpec | None
    raw_body: Any = None  # what the key's body hash is taken over (the item minus its key)
    idempotency_key: str | None = None
    refused: errors.JobgateError | None = None


# One item's answer: its job (new or replayed) or why it was refused.
ItemResult = SubmitOutcome | errors.JobgateError


async def submit_bulk(
    jobs: JobService,
    *,
    tenant_id: str,
    items: Sequence[SubmitManyItem],
    route: str = SUBMIT_ROUTE,
    key_ttl_s: float | None = None,
) -> list[ItemResult]:
    """Store every acceptable item in one transaction; answer one result per item, in order.

    An item that is invalid (fields, model, provider, tenant limits, webhook URL) or whose key
    was used with another body is refused in its slot and does not sink the others. A key
    shares its binding with `POST /v1/jobs` (same route), so a single submit retried as a
    bulk item, or the reverse, answers the same job. The queue bounds apply to the call as a
    whole: errors.QueueFull is raised with nothing stored."""
    if len(items) > MAX_BULK_ITEMS:
        raise errors.InvalidRequest(
            f"at most {MAX_BULK_ITEMS} jobs per call (got {len(items)})",
            param="jobs",
            code="too_many_items",
        )
    results: list[ItemResult | None] = [None] * len(items)
    ttl_s = key_ttl_s or jobs.settings.idempotency_ttl_s
    # Once for the call: the breakers any worker opened, before the items' routes pick.
    specs = [item.spec for item in items if item.spec is not None]
    await jobs.fresh_breakers(specs)
    # Once for the call: the tenant's limits and the queue counts apply alike to every item.
    # Far from the queue bounds counting every item (as JobService.submit_many), the insert
    # skips the exact count; near one it counts exactly.
    admission = await jobs.limits.admission(tenant_id, adding=len(specs) - 1) if specs else None
    minted = iter(jobs.new_ids(specs))  # together: one per item with a spec, in order
    job_ids = [None if item.spec is None else next(minted) for item in items]
    if admission is not None and _streamable(items, admission):
        await _submit_streamed(jobs, tenant_id, items, job_ids, admission, results)
    else:
        await _submit_together(jobs, tenant_id, items, job_ids, route, ttl_s, admission, results)
    created = sum(1 for r in results if isinstance(r, SubmitOutcome) and not r.replayed)
    if created:  # counted towards the bounds until the next count includes them
        jobs.limits.admitted(tenant_id, created)
    log.info(
        "jobs submitted",
        extra={
            "tenant_id": tenant_id,
            "count": created,
            "to_state": JobState.QUEUED.value,
            "actor": "api",
        },
    )
    return [r for r in results if r is not None]


def _streamable(items: Sequence[SubmitManyItem], admission: Admission) -> bool:
    """Whether the call can be stored chunk by chunk while its next items are prepared
    (job_insert in chunks): no queue bound within reach, nothing refused by a full queue, no
    keys to bind (their replays are read per call) and no webhook URL to resolve (a lookup
    that must not run inside the transaction)."""
    return (
        admission.bounds is None
        and admission.full is None
        and all(
            item.idempotency_key is None and (item.spec is None or item.spec.webhook is None)
            for item in items
        )
    )


async def _submit_streamed(
    jobs: JobService,
    tenant_id: str,
    items: Sequence[SubmitManyItem],
    job_ids: Sequence[str | None],
    admission: Admission,
    results: list[ItemResult | None],
) -> None:
    placed: list[int] = []  # the index of each job inserted, in order
    prepare, admit = jobs.preparer(tenant_id), admission.admit

    def chunks() -> Iterator[list[NewJob]]:
        for start, stop in chunk_spans(len(items)):
            chunk = []
            for index in range(start, stop):
                item = items[index]
                try:
                    if item.refused is not None:
                        raise item.refused
                    assert item.spec is not None
                    chunk.append(admit(prepare(item.spec, job_ids[index])))
                    placed.append(index)
                except errors.StorageError:
                    raise
                except errors.JobgateError as exc:
                    results[index] = exc
            yield chunk

    inserted = await jobs.storage.job_insert(chunks=chunks())
    for index, job in zip(placed, inserted.jobs, strict=True):
        results[index] = SubmitOutcome(job, False, 202)


async def _submit_together(
    jobs: JobService,
    tenant_id: str,
    items: Sequence[SubmitManyItem],
    job_ids: Sequence[str | None],
    route: str,
    ttl_s: float,
    admission: Admission | None,
    results: list[ItemResult | None],
) -> None:
    """Every item prepared first, its webhook URLs vetted together, then one job_insert
    (keys bound, bounds counted)."""
    stored: list[tuple[int, BulkItem]] = []
    prepare = jobs.preparer(tenant_id)
    for index, item in enumerate(items):
        try:
            if item.refused is not None:
                raise item.refused
            job_id = job_ids[index]
            assert item.spec is not None and admission is not None and job_id is not None
            prepared = _prepare(prepare, item, route, ttl_s, admission, job_id)
            stored.append((index, prepared))
        except errors.StorageError:
            raise
        except errors.JobgateError as exc:
            results[index] = exc
    stored = await _vet_webhooks(jobs, stored, results)
    if stored:
        assert admission is not None
        try:
            inserted = await jobs.storage.job_insert(
                chunks=[[bulk.job for _, bulk in stored]],
                keys=[bulk.idempotency for _, bulk in stored],
                queue_limit=admission.bounds,
            )
        except errors.QueueFull as exc:
            raise jobs.limits.queue_full(exc, tenant_id) from None
        for (index, _), outcome in zip(stored, inserted.results, strict=True):
            results[index] = outcome


async def _vet_webhooks(
    jobs: JobService, stored: list[tuple[int, BulkItem]], results: list[ItemResult | None]
) -> list[tuple[int, BulkItem]]:
    """The items whose webhook URL (if any) the SSRF guard accepts; each refusal goes in its
    item's place. The call's lookups run side by side, bounded (webhook_guard.resolve_many):
    a thousand names that do not resolve cost seconds, not a thousand lookups in a row."""
    hooked = [(index, bulk) for index, bulk in stored if bulk.job.webhook is not None]
    if not hooked:
        return stored
    vetted = await jobs.webhook_guard.resolve_many(
        [bulk.job.webhook["url"] for _, bulk in hooked if bulk.job.webhook is not None],
        param="webhook.url",
    )
    refused = set()
    for (index, _), outcome in zip(hooked, vetted, strict=True):
        if isinstance(outcome, errors.JobgateError):
            results[index] = outcome
            refused.add(index)
    return [(index, bulk) for index, bulk in stored if index not in refused]


def _prepare(
    prepare: Callable[[SubmitSpec, str | None], NewJob],
    item: SubmitManyItem,
    route: str,
    ttl_s: float,
    admission: Admission,
    job_id: str,
) -> BulkItem:
    assert item.spec is not None
    claim = None
    if item.idempotency_key is not None:
        if not idempotency.key_is_valid(item.idempotency_key):
            raise errors.InvalidRequest(
                "idempotency_key must be 1-255 printable ASCII characters",
                param="idempotency_key",
                code="invalid_idempotency_key",
            )
        raw = item.raw_body if item.raw_body is not None else item.spec.body
        claim = IdempotencyClaim(
            route=route,
            key=item.idempotency_key,
            body_hash=idempotency.body_hash(raw),
            status_code=202,
            ttl_s=ttl_s,
        )
    new_job = admission.admit(prepare(item.spec, job_id))
    return BulkItem(job=new_job, idempotency=claim)
