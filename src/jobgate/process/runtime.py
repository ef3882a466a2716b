"""One jobgate process: storage, providers and services built from settings, with a factory per
background role; `process.roles` decides which roles run and supervises them."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING

from jobgate import errors
from jobgate.clock import Clock, SystemClock
from jobgate.config import Settings
from jobgate.ids import IdGenerator, RandomIds
from jobgate.providers.registry import ProviderRegistry
from jobgate.roles import batch_runner
from jobgate.roles.batch_runner import BatchRunner
from jobgate.roles.dispatcher import Dispatcher
from jobgate.roles.reaper import Reaper
from jobgate.roles.reconciler import Reconciler
from jobgate.roles.supervisor import RoleSupervisor
from jobgate.roles.worker import Worker
from jobgate.services import config_reload
from jobgate.services.batch_counts import RecentBatchCounts
from jobgate.services.job_tokens import JobTokenService
from jobgate.services.jobs import JobService
from jobgate.services.limits import LimitsService
from jobgate.services.live_feeds import LiveFeeds
from jobgate.services.operators import OperatorService
from jobgate.services.presence import Presence
from jobgate.services.replica_reads import ReplicaReads
from jobgate.services.schedules import ScheduleService
from jobgate.services.tenants import TenantService
from jobgate.services.waiting import Waits
from jobgate.services.webhooks import WebhookService
from jobgate.storage.factory import storage_for_url
from jobgate.storage.protocol import Storage
from jobgate.transports.base import Transport

if TYPE_CHECKING:  # imported where used: the CLI's admin commands need neither the web app
    # (FastAPI, its routes) nor the roles, ~0.7 s of imports per command
    from jobgate.http.context import AppContext

log = logging.getLogger(__name__)


class Runtime:
    """The services of one process, wired once: storage, providers, limits, jobs, tenants,
    operators and webhooks; each background role is built fresh by its factory method (a
    supervisor rebuilds a crashed role through it)."""

    def __init__(
        self,
        settings: Settings,
        *,
        storage: Storage | None = None,
        clock: Clock | None = None,
        ids: IdGenerator | None = None,
        providers: ProviderRegistry | None = None,
        reload: Callable[[], Settings] | None = None,
    ) -> None:
        self.settings = settings
        # Reads the settings again when the configuration file changes (config_reload).
        self.reload = reload
        self.clock = clock or SystemClock()
        self.ids = ids or RandomIds(self.clock)
        self.storage = storage or storage_for_url(
            settings.database_url,
            clock=self.clock,
            pool_size=settings.database_pool_size,
            listen_url=settings.listen_database_url,
        )
        self.providers = providers or ProviderRegistry.from_settings(settings, clock=self.clock)
        self.limits = LimitsService(storage=self.storage, settings=settings, clock=self.clock)
        reads = replica_reads(settings, self.storage, self.clock)
        self.jobs = JobService(
            storage=self.storage,
            providers=self.providers,
            settings=settings,
            clock=self.clock,
            ids=self.ids,
            limits=self.limits,
            reads=reads,
        )
        # One per process: every live stream reader of a job here shares one feed of it.
        self.feeds = LiveFeeds(self.jobs, readers_per_tenant=settings.stream_readers_per_tenant)
        self.tenants = TenantService(storage=self.storage, ids=self.ids)
        # Which roles have a live process: this one's (process.roles fills `local`), the
        # others' by their heartbeats.
        self.presence = Presence(self.storage, settings, clock_=self.clock)
        self.operators = OperatorService(storage=self.storage, ids=self.ids)
        self.job_tokens = JobTokenService(storage=self.storage, clock=self.clock)
        self.supervisors: dict[str, RoleSupervisor] = {}  # by role, while run_roles runs
        self.webhooks = WebhookService(
            storage=self.storage,
            settings=settings,
            clock=self.clock,
            ids=self.ids,
            guard=self.jobs.webhook_guard,  # one SSRF policy for endpoints and per-job URLs
        )

    async def open(self, *, migrate: bool = True) -> None:
        await self.storage.open()
        if migrate:
            applied = await self.storage.migrate()
            if applied:
                log.info("migrations applied", extra={"versions": applied})

    async def close(self) -> None:
        await self.providers.aclose()
        await self.jobs.reads.close()
        await self.storage.close()

    def reconfigure(self, settings: Settings) -> None:
        """Apply a reloaded file's limits, caps and routes (services.config_reload); raises
        errors.ConfigError, changing nothing, when they cannot apply."""
        self.providers.reconfigure(settings)
        self.limits.reconfigure(settings)
        later = config_reload.needing_restart(self.settings, settings)
        if later:
            log.warning("changed settings that apply on a restart: %s", ", ".join(later))

    def app_context(self) -> AppContext:
        from jobgate.http.context import AppContext

        return AppContext(
            settings=self.settings,
            storage=self.storage,
            jobs=self.jobs,
            tenants=self.tenants,
            webhooks=self.webhooks,
            operators=self.operators,
            job_tokens=self.job_tokens,
            batch_counts=RecentBatchCounts(storage=self.storage),
            presence=self.presence,
            waits=Waits(storage=self.storage, jobs=self.jobs, presence_=self.presence),
            feeds=self.feeds,
        )

    def worker(
        self,
        *,
        concurrency: int | None = None,
        worker_id: str | None = None,
        transport: Transport | None = None,
        on_claimed: Callable[[], None] | None = None,
    ) -> Worker:
        return Worker(
            storage=self.storage,
            providers=self.providers,
            settings=self.settings,
            clock=self.clock,
            concurrency=concurrency,
            worker_id=worker_id,
            limits=self.limits,
            transport=transport,
            on_claimed=on_claimed,
        )

    def dispatcher(self) -> Dispatcher:
        return Dispatcher(storage=self.storage, settings=self.settings, clock=self.clock)

    def reconciler(self) -> Reconciler:
        return Reconciler(
            storage=self.storage, providers=self.providers, settings=self.settings, clock=self.clock
        )

    def reaper(self) -> Reaper:
        return Reaper(storage=self.storage, settings=self.settings)

    def schedules(self) -> ScheduleService:
        return ScheduleService(self.jobs)

    def batch_runner(self, *, interval_s: float = batch_runner.INTERVAL_S) -> BatchRunner:
        """The batches role: batch lines are checked as their HTTP routes check a request."""
        from jobgate.http import batch_lines  # the edge's models: imported by this role only

        return BatchRunner(jobs=self.jobs, check_line=batch_lines.check, interval_s=interval_s)

    async def run_roles(
        self,
        roles: tuple[str, ...],
        stop: asyncio.Event,
        *,
        sock: socket.socket | None = None,
    ) -> None:
        """Run `roles` (names from `process.roles.ROLES`) until `stop` is set, then shut each
        down gracefully."""
        from jobgate.process import roles as process_roles

        await process_roles.run_roles(self, roles, stop, sock=sock)


def replica_reads(settings: Settings, primary: Storage, clock: Clock) -> ReplicaReads:
    """The routing of reads that may lag: to JOBGATE_READ_DATABASE_URL's replica when set
    (its pool as large as the primary's), else every read to the primary."""
    if not settings.read_database_url:
        return ReplicaReads(primary=primary, clock=clock)
    from jobgate.storage.postgres import store as postgres

    if not postgres.is_postgres(primary):
        raise errors.ConfigError(
            "JOBGATE_READ_DATABASE_URL", "a read replica needs a PostgreSQL JOBGATE_DATABASE_URL"
        )
    replica = postgres.postgres_store(
        settings.read_database_url, pool_size=settings.database_pool_size
    )
    return ReplicaReads(
        primary=primary,
        clock=clock,
        replica=replica,
        primary_wal=primary,
        max_lag_s=settings.read_max_lag_s,
    )
