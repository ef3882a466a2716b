"""One jobgate process: storage, providers and services built from settings, and the roles
(api, worker, reaper, ...) it runs until told to stop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable

import uvicorn

from jobgate import errors, transports
from jobgate.clock import Clock, SystemClock
from jobgate.config import Settings, config_file
from jobgate.http import edge_limits
from jobgate.http.app import create_app
from jobgate.http.context import AppContext
from jobgate.ids import IdGenerator, RandomIds
from jobgate.providers.registry import ProviderRegistry
from jobgate.services import config_reload, presence, rate_limits
from jobgate.services.batch_runner import BatchRunner
from jobgate.services.dispatcher import Dispatcher
from jobgate.services.jobs import JobService
from jobgate.services.limits import LimitsService
from jobgate.services.operators import OperatorService
from jobgate.services.reaper import Reaper
from jobgate.services.reconciler import Reconciler
from jobgate.services.schedules import ScheduleService
from jobgate.services.supervisor import Role, RoleSupervisor
from jobgate.services.tenants import TenantService
from jobgate.services.webhooks import WebhookService
from jobgate.services.worker import Worker, default_worker_id
from jobgate.storage.factory import storage_for_url
from jobgate.storage.protocol import Storage
from jobgate.transports import relay as transport_relay
from jobgate.transports.base import Transport, TransportUnavailable

log = logging.getLogger(__name__)

ROLES = ("api", "worker", "reaper", "dispatcher", "reconciler", "batches")


def available_roles() -> tuple[str, ...]:
    """Every role, in start order (`jobgate serve` runs them all)."""
    return ROLES


async def _close_role(role: Role) -> None:
    """Release what a role holds once it has stopped (the dispatcher's HTTP client)."""
    if isinstance(role, Dispatcher):
        await role.aclose()


class _Server(uvicorn.Server):
    """uvicorn without its own signal handlers: the runtime owns SIGTERM and SIGINT."""

    @contextlib.contextmanager
    def capture_signals(self):  # type: ignore[no-untyped-def]
        yield


class Runtime:
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
        self._reload = reload
        self.clock = clock or SystemClock()
        self.ids = ids or RandomIds(self.clock)
        self.storage = storage or storage_for_url(
            settings.database_url, clock=self.clock, pool_size=settings.database_pool_size
        )
        self.providers = providers or ProviderRegistry.from_settings(settings, clock=self.clock)
        self.limits = LimitsService(storage=self.storage, settings=settings, clock=self.clock)
        self.jobs = JobService(
            storage=self.storage,
            providers=self.providers,
            settings=settings,
            clock=self.clock,
            ids=self.ids,
            limits=self.limits,
        )
        self.tenants = TenantService(storage=self.storage, ids=self.ids)
        self.operators = OperatorService(storage=self.storage, ids=self.ids)
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
        return AppContext(
            settings=self.settings,
            storage=self.storage,
            jobs=self.jobs,
            tenants=self.tenants,
            webhooks=self.webhooks,
            operators=self.operators,
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

    async def _open_transport(self) -> Transport | None:
        """The broker transport of JOBGATE_TRANSPORT, opened; None for `database`. A broker
        down at start is an outage like any other (transport_fallback decides)."""
        worker_id = default_worker_id()
        transport = transports.for_settings(self.settings, consumer=worker_id)
        if transport is not None:
            try:
                await transport.open()
            except TransportUnavailable as exc:
                log.warning("broker unreachable at start: %s", exc.message)
        return transport

    def dispatcher(self) -> Dispatcher:
        return Dispatcher(storage=self.storage, settings=self.settings, clock=self.clock)

    def reconciler(self) -> Reconciler:
        return Reconciler(
            storage=self.storage, providers=self.providers, settings=self.settings, clock=self.clock
        )

    def reaper(self) -> Reaper:
        return Reaper(storage=self.storage, settings=self.settings)

    def batch_runner(self) -> BatchRunner:
        return BatchRunner(jobs=self.jobs)

    async def run_roles(
        self,
        roles: tuple[str, ...],
        stop: asyncio.Event,
        *,
        sock: socket.socket | None = None,
    ) -> None:
        """Run `roles` until `stop` is set, then shut each down gracefully."""
        unknown = [r for r in roles if r not in ROLES]
        if unknown:
            raise errors.ConfigError(
                "roles", f"unknown role {unknown[0]!r} (one of {', '.join(ROLES)})"
            )
        if "worker" in roles or "reconciler" in roles:
            self.providers.require_credentials()  # fail at start, not on the first job
        await self.storage.listen()
        tasks: list[asyncio.Task[None]] = []
        stoppers: list[Callable[[], None]] = []
        server: _Server | None = None
        transport: Transport | None = None
        relay: transport_relay.Relay | None = None
        if "worker" in roles:
            transport = await self._open_transport()
            if transport is not None:  # every worker process relays "job ready" messages
                relay = transport_relay.Relay(
                    storage=self.storage,
                    transport=transport,
                    settings=self.settings,
                    limits=self.limits,
                    skip_providers=lambda: rate_limits.limited_providers(self.providers.configs()),
                )
                tasks.append(asyncio.create_task(relay.run(), name="transport-relay"))
                stoppers.append(relay.request_stop)

        def build_worker() -> Worker:
            return self.worker(
                transport=transport, on_claimed=None if relay is None else relay.wake
            )

        # Background roles are supervised: one that crashes is rebuilt and restarted with
        # backoff (counted in jobgate_role_restarts_total); only a fatal error ends the process.
        builders: dict[str, Callable[[], Role]] = {
            "worker": build_worker,
            "reaper": self.reaper,
            "dispatcher": self.dispatcher,
            "reconciler": self.reconciler,
            "batches": self.batch_runner,
        }
        supervised = [(name, build) for name, build in builders.items() if name in roles]
        if "reaper" in roles:  # recurring schedules ride with the reaper
            supervised.append(("schedules", lambda: ScheduleService(self.jobs)))
        for name, build in supervised:
            supervisor = RoleSupervisor(name, build, clock=self.clock, close=_close_role)
            self.supervisors[name] = supervisor
            tasks.append(asyncio.create_task(supervisor.run(), name=name))
            stoppers.append(supervisor.request_stop)
        if "reconciler" in roles:
            beat = presence.Heartbeat(self.storage, self.settings)  # "a reconciler is alive"
            tasks.append(asyncio.create_task(beat.run(), name="reconciler-heartbeat"))
            stoppers.append(beat.request_stop)
        if "api" in roles:
            config = uvicorn.Config(
                create_app(self.app_context()),
                host=self.settings.host,
                port=self.settings.port,
                log_config=None,
                access_log=False,
                lifespan="off",
                timeout_graceful_shutdown=max(1, int(self.settings.shutdown_grace_s)),
                server_header=False,
                http=edge_limits.protocol_class(self.settings),
            )
            server = _Server(config)
            tasks.append(
                asyncio.create_task(
                    server.serve(sockets=[sock] if sock is not None else None), name="api"
                )
            )

            def stop_server() -> None:
                assert server is not None
                server.should_exit = True

            stoppers.append(stop_server)
        if self._reload is not None:
            watcher = config_reload.ConfigWatcher(
                path=config_file(), load=self._reload, apply=self.reconfigure
            )
            tasks.append(asyncio.create_task(watcher.run(), name="config-watcher"))
            stoppers.append(watcher.request_stop)
        stopped = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait([stopped, *tasks], return_when=asyncio.FIRST_COMPLETED)
        crashed = [task for task in done if task is not stopped and task.exception() is not None]
        for task in crashed:
            log.error("role %s crashed", task.get_name(), exc_info=task.exception())
        stop.set()
        for request_stop in stoppers:
            request_stop()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        stopped.cancel()
        if transport is not None:
            await transport.close()
        for task, result in zip(tasks, results, strict=True):
            if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
                log.error("role %s ended with %s", task.get_name(), type(result).__name__)
        if crashed:
            # Exit non-zero, so that a supervisor restarts the process instead of believing
            # it was stopped on purpose.
            raise errors.JobgateError(f"role {crashed[0].get_name()} crashed")
