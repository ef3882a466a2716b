"""The job service: what the API does with a request, independent of HTTP."""

from __future__ import annotations

import asyncio
import builtins
import dataclasses
import functools
import itertools
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Literal

from jobgate import errors, metrics, tracing
from jobgate.clock import Clock, from_unix
from jobgate.config import Settings
from jobgate.domain import events as domain_events
from jobgate.domain import frozen, idempotency, job_search, on_retry, ranges
from jobgate.domain import limits as limit_rules
from jobgate.domain.job import Job, JobEvent, NewJob
from jobgate.domain.job_search import JobSearch
from jobgate.domain.states import JobState
from jobgate.ids import IdGenerator
from jobgate.providers import streaming
from jobgate.providers.base import Provider
from jobgate.providers.registry import ProviderRegistry
from jobgate.services.breaker_sync import BreakerSync
from jobgate.services.limits import LimitsService
from jobgate.services.replica_reads import LaggingStore, ReplicaReads
from jobgate.services.submit_group_commit import SubmitGroupCommit
from jobgate.services.submit_summary import SubmitSummary
from jobgate.services.webhook_guard import UrlGuard
from jobgate.storage.protocol import Storage
from jobgate.storage.records import BulkItem, IdempotencyClaim, JobStatus, SubmitOutcome
from jobgate.wakeups import wait_for

log = logging.getLogger(__name__)

SUBMIT_ROUTE = "POST /v1/jobs"
MAX_WAIT_S = ranges.MAX_WAIT_S

# How a read answers a job: whole, as its views show it (no prompt), as a Response renders it.
JobRead = Literal["whole", "view", "without_input"]
# What routing answers for one job: (provider, model to send, the provider's execution timeout,
# the model route submitted for or None, the largest output cap the provider allows the model).
_Routed = tuple[Provider, str | None, float | None, str | None, int]
BatchServes = Callable[[str, str], bool]  # (provider, endpoint): its native batches take it


@frozen.record  # one per submit, per bulk item
class SubmitSpec:
    """A validated submit request (field types and ranges checked by the HTTP layer)."""

    endpoint: str
    body: dict[str, Any]
    provider: str | None = None
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)
    webhook: dict[str, Any] | None = None
    priority: int | None = None
    max_attempts: int | None = None
    start_timeout_s: float | None = None
    execution_timeout_s: float | None = None
    run_at: float | None = None  # Unix seconds
    delay_s: float | None = None
    concurrency_key: str | None = None
    api: str = "jobs"
    id_prefix: str = "job"
    stream: bool = False  # live output: the worker streams the call into the output log
    stall_timeout_s: float | None = None  # None: the setting (JOBGATE_STALL_TIMEOUT_S)
    on_retry: str | None = None  # "continue" | "restart" (None: restart); streaming jobs only
    # body and metadata already passed ranges.check_json (the HTTP layer's strict parse of
    # the whole request): prepare does not walk them again.
    json_checked: bool = False


class JobService:
    def __init__(
        self,
        *,
        storage: Storage,
        providers: ProviderRegistry,
        settings: Settings,
        clock: Clock,
        ids: IdGenerator,
        limits: LimitsService | None = None,
        reads: ReplicaReads | None = None,
    ) -> None:
        self.storage = storage
        # Status, list, events and a long poll's first read: a read replica may answer them.
        self.reads = reads or ReplicaReads(primary=storage, clock=clock)
        self.limits = limits or LimitsService(storage=storage, settings=settings, clock=clock)
        self.providers = providers
        self.settings = settings
        self.clock = clock
        self.ids = ids
        self.batcher = SubmitGroupCommit(storage=storage, clock=clock)  # group commit of submits
        self.submits = SubmitSummary(clock=clock)  # the log of single submits
        self.webhook_guard = UrlGuard.from_settings(settings)  # the SSRF guard for webhook.url
        # A model route's first target skips providers whose breaker any worker opened.
        self.breakers = BreakerSync(
            storage=storage, gates=providers.gates, clock=clock, owner="api", writes=False
        )
        # A waiter is woken by the change itself (this process's commits, NOTIFY on PostgreSQL,
        # the data_version watch on SQLite); re-reading on this period is only a safety net.
        self.poll_fallback_s = 30.0
        self.search_walk_rows = job_search.WALK_ROWS  # the bound of a search page's walk

    # -- submit -------------------------------------------------------------------------

    async def submit(
        self,
        *,
        tenant_id: str,
        spec: SubmitSpec,
        raw_body: Any = None,
        idempotency_key: str | None = None,
        route: str = SUBMIT_ROUTE,
        job_id: str | None = None,
    ) -> SubmitOutcome:
        """Validate, route and store a job (its id `job_id` if given, minted by `ids`). With an
        Idempotency-Key, a repeat of the same request answers the original job; nothing
        invalid is ever stored."""
        claim = None
        if idempotency_key is not None:
            if not idempotency.key_is_valid(idempotency_key):
                raise errors.InvalidRequest(
                    "Idempotency-Key must be 1-255 printable ASCII characters",
                    param="Idempotency-Key",
                    code="invalid_idempotency_key",
                )
            claim = IdempotencyClaim(
                route=route,
                key=idempotency_key,
                body_hash=idempotency.body_hash(raw_body if raw_body is not None else spec.body),
                status_code=202,
                ttl_s=self.settings.idempotency_ttl_s,
            )
        await self.fresh_breakers([spec])
        with tracing.span("jobgate.submit", tenant_id=tenant_id, api=spec.api) as submit_span:
            new_job, queue_limit = await self.limits.admit(
                self.prepare(tenant_id=tenant_id, spec=spec, job_id=job_id),
                may_replay=claim is not None,
            )
            if new_job.webhook is not None:  # resolve and vet the host (delivery does again)
                await self.webhook_guard.resolve(new_job.webhook["url"], param="webhook.url")
            try:  # committed with the submits that arrive with it (services.submit_group_commit)
                outcome = await self.batcher.insert(
                    BulkItem(job=new_job, idempotency=claim), queue_limit
                )
            except errors.QueueFull as exc:
                raise self.limits.queue_full(exc, tenant_id) from None
            submit_span.set_attribute("jobgate.job_id", outcome.job.id)
            submit_span.set_attribute("jobgate.replayed", outcome.replayed)
        self.reads.wrote(tenant_id)
        if not outcome.replayed:
            self.limits.admitted(tenant_id)
            self.submits.submitted(
                job_id=new_job.id,
                tenant_id=tenant_id,
                provider=new_job.provider,
                endpoint=new_job.endpoint,
            )
        return outcome

    async def submit_many(
        self, *, tenant_id: str, specs: Sequence[SubmitSpec]
    ) -> builtins.list[Job]:
        """The batched enqueue: validate, route and store many jobs in one transaction, all
        of them or none (the first invalid one raises before anything is stored). No
        idempotency keys: a batch whose outcome is unknown is retried whole."""
        if not specs:
            return []
        await self.fresh_breakers(specs)
        # Once: the same for every item. Far from the queue bounds, counting the whole batch
        # (the counts of at most a second ago plus what this process admitted since), the
        # insert skips the exact count as a single submit does; near one it counts exactly.
        admission = await self.limits.admission(tenant_id, adding=len(specs) - 1)
        ids = self.new_ids(specs)
        prepare, admit = self.preparer(tenant_id), admission.admit

        def prepared(start: int, stop: int) -> builtins.list[NewJob]:
            return [
                admit(prepare(spec, job_id))
                for spec, job_id in zip(specs[start:stop], ids[start:stop], strict=True)
            ]

        # The first chunk is made before the storage call, so that a refusal every item gets
        # (a full queue, a model not allowed) is raised as it always was, with nothing sent.
        spans = chunk_spans(len(specs))
        first = prepared(*spans[0])
        try:
            if admission.bounds is None:
                # Far from every bound: the storage inserts each chunk while the next one is
                # prepared here (one transaction: all of them or none).
                rest = (prepared(start, stop) for start, stop in spans[1:])
                inserted = await self.storage.job_insert(chunks=itertools.chain([first], rest))
            else:
                jobs = first + [job for span in spans[1:] for job in prepared(*span)]
                inserted = await self.storage.job_insert(
                    chunks=[jobs], queue_limit=admission.bounds
                )
        except errors.QueueFull as exc:
            raise self.limits.queue_full(exc, tenant_id) from None
        stored = inserted.jobs
        self.reads.wrote(tenant_id)
        self.limits.admitted(tenant_id, len(stored))
        log.info(
            "jobs submitted",
            extra={"tenant_id": tenant_id, "count": len(stored), "to_state": JobState.QUEUED.value},
        )
        return stored

    async def fresh_breakers(self, specs: Sequence[SubmitSpec]) -> None:
        """Before a model route picks its first target: the breakers any worker opened (read
        at most once a second)."""
        models = {  # (a call's items mostly share one model: each is asked once)
            model
            for spec in specs
            if spec.provider is None and isinstance(model := spec.body.get("model"), str)
        }
        if any(self.providers.route_of(model) for model in models):
            await self.breakers.sync()

    def new_ids(self, specs: Sequence[SubmitSpec]) -> builtins.list[str]:
        """One job id per spec, in order, minted together per id prefix (a call's jobs are
        created at one moment: one clock read and one draw of randomness, not one per job)."""
        prefix = specs[0].id_prefix if specs else ""
        if all(spec.id_prefix == prefix for spec in specs):  # the usual call: one prefix
            return self.ids.new_many(prefix, len(specs))
        prefixes = Counter(spec.id_prefix for spec in specs)
        minted = {prefix: iter(self.ids.new_many(prefix, n)) for prefix, n in prefixes.items()}
        return [next(minted[spec.id_prefix]) for spec in specs]

    def prepare(self, *, tenant_id: str, spec: SubmitSpec, job_id: str | None = None) -> NewJob:
        """Route and validate a submit; raise errors.InvalidRequest for anything unrunnable.
        The job takes `job_id` if given (new_ids), else an id of its own."""
        return self._prepare(tenant_id, {}, spec, job_id)

    def preparer(
        self, tenant_id: str, *, batch_serves: BatchServes | None = None
    ) -> Callable[[SubmitSpec, str | None], NewJob]:
        """`prepare` for the items of one call, as `preparer(spec, job_id)`: what routing
        answers for each (provider, model, api) is looked up once per call, not per item
        (routing, the provider's configuration and the model route are a fifth of preparing
        an item). A model route is still routed per item: its first target is picked by the
        breakers, job by job.

        `batch_serves(provider, endpoint)` (batch lines only): whether the provider's native
        batches take lines of the endpoint. Such a line whose endpoint the provider's jobs do
        not serve is not refused here: the caller checks it against the batch API instead
        (Anthropic's Message Batches take /v1/chat/completions lines, its jobs do not)."""
        return functools.partial(self._prepare, tenant_id, {}, batch_serves=batch_serves)

    def _prepare(
        self,
        tenant_id: str,
        routes: dict[tuple[str | None, str | None, str], _Routed],
        spec: SubmitSpec,
        job_id: str | None,
        *,
        batch_serves: BatchServes | None = None,
    ) -> NewJob:
        """prepare, with `routes` the routing answers kept for the call so far."""
        _check_ranges(spec)
        body = spec.body
        model = body.get("model")
        if model is not None and not isinstance(model, str):
            raise errors.InvalidRequest("body.model must be a string", param="body.model")
        key = (spec.provider, model, spec.api)
        routed = routes.get(key)
        if routed is None:
            routed = self._route(spec.provider, model, spec.api)
            if routed[3] is None:  # not a model route: the same answer for the whole call
                routes[key] = routed
        provider, routed_model, execution_timeout_s, model_route, output_bound = routed
        if routed_model != model:
            body = {**body, "model": routed_model}
        limit_rules.check_output_bound(
            body, bound=output_bound, provider=provider.name, model=routed_model
        )
        try:
            provider.validate(spec.endpoint, body)
        except errors.InvalidRequest as exc:
            unserved = exc.code == "unsupported_endpoint"
            if not (unserved and batch_serves and batch_serves(provider.name, spec.endpoint)):
                raise
        if spec.stream:
            body = {**body, "stream": True}  # kept with the job: the worker reads it there
        if spec.stall_timeout_s is not None:
            body = {**body, streaming.STALL_TIMEOUT: spec.stall_timeout_s}  # read there too
        if spec.on_retry == on_retry.CONTINUE:
            body = {**body, on_retry.ON_RETRY: spec.on_retry}  # the worker reads it there
        return NewJob(  # by position, in field order (a bulk item builds one)
            self.ids.new(spec.id_prefix) if job_id is None else job_id,  # id
            tenant_id,
            provider.name,
            spec.endpoint,
            routed_model,  # model
            body,  # request
            spec.metadata,
            self._check_webhook(spec.webhook),
            spec.api,
            5 if spec.priority is None else spec.priority,
            spec.max_attempts or self.settings.max_attempts,
            spec.start_timeout_s,
            spec.execution_timeout_s or execution_timeout_s,
            None if spec.run_at is None else from_unix(spec.run_at),  # run_at
            spec.delay_s or 0.0,
            spec.concurrency_key,
            model_route,
        )

    def _route(self, provider: str | None, model: str | None, api: str) -> _Routed:
        """What routing answers for a job: the provider, the model to send it, the provider's
        execution timeout, the model route submitted for (None: not a model route), and the
        largest output cap the provider allows that model."""
        chosen, routed_model = self.providers.route(provider, model, api=api)
        is_route = provider is None and self.providers.route_of(model) is not None
        model_route = model if is_route else None
        config = self.providers.config(chosen.name)
        bound = config.output_bound(routed_model)
        return chosen, routed_model, config.execution_timeout_s, model_route, bound

    def _check_webhook(self, webhook: dict[str, Any] | None) -> dict[str, Any] | None:
        if webhook is None:
            return None
        url = webhook.get("url")
        if not isinstance(url, str):
            raise errors.InvalidRequest(
                "webhook.url must be an absolute https URL",
                param="webhook.url",
                code="invalid_webhook_url",
            )
        url = self.webhook_guard.check_static(url, param="webhook.url").url
        event_types = webhook.get("event_types") or []
        progress = [t for t in event_types if t in domain_events.PROGRESS_EVENT_TYPES]
        if progress:
            raise errors.InvalidRequest(
                f"{progress[0]} goes to webhook endpoints only (their "
                "progress_interval_s throttles it): register one at /v1/webhook_endpoints",
                param="webhook.event_types",
            )
        unknown = [t for t in event_types if t not in domain_events.EVENT_TYPES]
        if unknown:
            raise errors.InvalidRequest(
                f"unknown webhook event type {unknown[0]!r}", param="webhook.event_types"
            )
        return {"url": url, "event_types": list(event_types)}

    # -- read ---------------------------------------------------------------------------

    async def get(self, *, tenant_id: str, job_id: str) -> Job:
        job = await self.storage.job_get(job_id=job_id, tenant_id=tenant_id)
        if job is None:
            raise errors.NotFound("job", job_id)
        return job

    async def view(self, *, tenant_id: str, job_id: str) -> Job:
        """`get` as the job's views read it (storage.job_view): its request may hold only the
        members they read, not the prompt they never show."""
        job = await self.storage.job_view(job_id=job_id, tenant_id=tenant_id)
        if job is None:
            raise errors.NotFound("job", job_id)
        return job

    async def status(self, *, tenant_id: str, job_id: str) -> JobStatus:
        """`view`, and for a queued job its place in its tenant's line, read together (a read
        replica may answer: `reads`)."""
        status = await self.reads.read(
            tenant_id, lambda store: store.job_status(job_id=job_id, tenant_id=tenant_id)
        )
        if status is None:
            raise errors.NotFound("job", job_id)
        return status

    async def without_input(self, *, tenant_id: str, job_id: str, may_lag: bool = False) -> Job:
        """`get` as a Response renders it (storage.job_without_input): its request may lack
        the `input` (the prompt) a Response never shows. `may_lag`: a status read, which a
        read replica may answer (`reads`); never a read that follows a change."""
        if may_lag:
            found = await self.reads.read(
                tenant_id,
                lambda store: store.job_without_input(job_id=job_id, tenant_id=tenant_id),
            )
        else:
            found = await self.storage.job_without_input(job_id=job_id, tenant_id=tenant_id)
        if found is None:
            raise errors.NotFound("job", job_id)
        return found

    async def wait(
        self,
        *,
        tenant_id: str,
        job_id: str,
        timeout_s: float,
        until_terminal: bool = False,
        read_as: JobRead = "whole",
    ) -> Job:
        """Long poll: the job once its state changes from what it is now (or, with
        until_terminal, once it is terminal), or as it stands when `timeout_s` runs out.
        Wakes on the change itself, not on a poll tick. Each read is `get`'s, `view`'s (no
        prompt) or `without_input`'s, as `read_as` says."""
        reads = {"whole": self.get, "view": self.view, "without_input": self.without_input}
        read = reads[read_as]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(timeout_s, MAX_WAIT_S)
        with self.storage.changes.watch_job(job_id) as changed:
            # The first read may be a replica's; each read after a wake-up is the primary's,
            # where the change that woke it is committed.
            first = await self.reads.read(
                tenant_id, lambda store: _read_as(store, read_as, tenant_id, job_id)
            )
            if first is None:
                raise errors.NotFound("job", job_id)
            job = first
            initial = job.state
            while not job.terminal and (until_terminal or job.state is initial):
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                await wait_for(changed, min(remaining, self.poll_fallback_s))
                job = await read(tenant_id=tenant_id, job_id=job_id)
        return job

    async def list(
        self,
        *,
        tenant_id: str,
        states: builtins.list[JobState] | None = None,
        dead_lettered: bool | None = None,
        after: str | None = None,
        limit: int = 20,
        search: JobSearch | None = None,
    ) -> job_search.Page:
        """A page (newest first) of the jobs matching `search` if given, each job as `view`
        reads it. A search's page walks at most `search_walk_rows` of the tenant's jobs, so it
        may be partial (fewer jobs than `limit`, none at all, and more to follow after its
        `last_id`). The cursor must name one of the tenant's jobs: any other id is NotFound,
        like every other unknown or foreign id. One server answers the cursor and the page (a
        read replica may: `reads`)."""
        search = search or JobSearch()

        async def page(store: LaggingStore) -> job_search.Page | None:
            if after is not None:
                if await store.job_view(job_id=after, tenant_id=tenant_id) is None:
                    return None
            if search.is_empty:
                jobs = await store.job_list(
                    tenant_id=tenant_id,
                    states=states,
                    dead_lettered=dead_lettered,
                    after=after,
                    limit=limit + 1,
                )
                return job_search.page(jobs, limit)
            found = await store.job_search(
                tenant_id=tenant_id,
                search=search,
                states=states,
                dead_lettered=dead_lettered,
                after=after,
                limit=limit + 1,
                walk_limit=self.search_walk_rows,
            )
            return job_search.page(found.jobs, limit, found.walked_to)

        answered = await self.reads.read(tenant_id, page)
        if answered is None:
            raise errors.NotFound("job", str(after))
        return answered

    async def events(
        self, *, tenant_id: str, job_id: str, after_seq: int = 0, limit: int = 1000
    ) -> builtins.list[JobEvent]:
        """The job's transitions after `after_seq`; one server answers whether the job is the
        tenant's and its events (a read replica may: `reads`)."""

        async def log_of(store: LaggingStore) -> builtins.list[JobEvent] | None:
            if await store.job_view(job_id=job_id, tenant_id=tenant_id) is None:
                return None
            return await store.job_events(job_id=job_id, after_seq=after_seq, limit=limit)

        events = await self.reads.read(tenant_id, log_of)
        if events is None:
            raise errors.NotFound("job", job_id)
        return events

    # -- change -------------------------------------------------------------------------

    async def cancel(self, *, tenant_id: str, job_id: str, actor: str = "api") -> Job:
        """Idempotent: queued -> cancelled now; running -> the worker stops the call and
        confirms; terminal -> unchanged. Never a conflict."""
        job = await self.storage.job_cancel(job_id=job_id, tenant_id=tenant_id, actor=actor)
        self.reads.wrote(tenant_id)
        if job is None:
            raise errors.NotFound("job", job_id)
        log.info(
            "job cancel",
            extra={
                "job_id": job_id,
                "tenant_id": tenant_id,
                "to_state": str(job.state),
                "actor": actor,
            },
        )
        return job

    async def delete(self, *, tenant_id: str, job_id: str) -> Job:
        """Cancel if still live, then purge input and result (the tombstone stays)."""
        await self.cancel(tenant_id=tenant_id, job_id=job_id, actor="api:delete")
        job = await self.storage.job_purge(job_id=job_id, tenant_id=tenant_id)
        self.reads.wrote(tenant_id)
        if job is None:
            raise errors.NotFound("job", job_id)
        return job

    async def retry(self, *, tenant_id: str, job_id: str, actor: str = "operator") -> Job:
        job = await self.storage.job_redrive(job_id=job_id, tenant_id=tenant_id, actor=actor)
        self.reads.wrote(tenant_id)
        if job is None:
            raise errors.NotFound("job", job_id)
        metrics.REDRIVES.labels("single").inc()
        log.info(
            "job transition",
            extra={
                "job_id": job_id,
                "tenant_id": tenant_id,
                "from_state": JobState.FAILED.value,
                "to_state": JobState.QUEUED.value,
                "reason": "redrive",
                "actor": actor,
            },
        )
        return job

    def retry_after_s(self, job: Job) -> int:
        """How long a poller should wait before asking again: longer as the job ages."""
        age_s = (self.clock.now() - job.created_at).total_seconds()
        return int(min(30, max(1, age_s / 10)))


# A batched enqueue is stored in chunks: a small first one, so that the database starts early,
# then larger ones, each prepared while the database inserts the one before. Since PostgreSQL
# stopped writing first events (migration 0028) its share per job is nearer this process's,
# and fewer, larger chunks pay less per statement: of the sizes tried for submit_many(500)
# (50/150, 50/225, 75/225), 75/225 cost the least wall time per job.
FIRST_CHUNK = 75
CHUNK = 225


def chunk_spans(count: int) -> builtins.list[tuple[int, int]]:
    """The [start, stop) spans of a batch of `count` (> 0) items, in order."""
    spans = [(0, min(FIRST_CHUNK, count))]
    for start in range(spans[0][1], count, CHUNK):
        spans.append((start, min(start + CHUNK, count)))
    return spans


def _check_ranges(spec: SubmitSpec) -> None:
    """The numeric ranges the HTTP models enforce, again for callers that build a SubmitSpec
    themselves (bulk and batch submits, the CLI): a value past them would overflow a deadline
    or a column on the worker's side, long after the client was told 202."""
    if not (  # the usual spec sets none of them: nothing to check
        spec.priority is None
        and spec.max_attempts is None
        and spec.start_timeout_s is None
        and spec.execution_timeout_s is None
        and spec.run_at is None
        and spec.delay_s is None
        and spec.concurrency_key is None
        and spec.stall_timeout_s is None
        and spec.on_retry is None
    ):
        _check_numbers(spec)
    if not spec.json_checked:
        ranges.check_json(spec.body, path="body")
        ranges.check_json(spec.metadata, path="metadata")


def _check_numbers(spec: SubmitSpec) -> None:
    ranges.check_timeout(spec.start_timeout_s, "start_timeout_s")
    ranges.check_timeout(spec.execution_timeout_s, "execution_timeout_s")
    ranges.check_schedule(spec.run_at, spec.delay_s)
    ranges.check_concurrency_key(spec.concurrency_key)
    ranges.check_stall_timeout(spec.stall_timeout_s)
    on_retry.check_option(spec.on_retry, stream=spec.stream, endpoint=spec.endpoint)
    if (
        spec.priority is not None
        and not ranges.PRIORITY_MIN <= spec.priority <= ranges.PRIORITY_MAX
    ):
        raise errors.InvalidRequest(
            f"priority must be between {ranges.PRIORITY_MIN} and {ranges.PRIORITY_MAX}",
            param="priority",
            code="number_out_of_range",
        )
    if spec.max_attempts is not None and not 1 <= spec.max_attempts <= ranges.MAX_ATTEMPTS_MAX:
        raise errors.InvalidRequest(
            f"max_attempts must be between 1 and {ranges.MAX_ATTEMPTS_MAX}",
            param="max_attempts",
            code="number_out_of_range",
        )


async def _read_as(
    store: LaggingStore, read_as: JobRead, tenant_id: str, job_id: str
) -> Job | None:
    """A job as `wait`'s `read_as` reads it: whole, as its views read it, or without input."""
    if read_as == "view":
        return await store.job_view(job_id=job_id, tenant_id=tenant_id)
    if read_as == "without_input":
        return await store.job_without_input(job_id=job_id, tenant_id=tenant_id)
    return await store.job_get(job_id=job_id, tenant_id=tenant_id)
