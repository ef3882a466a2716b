"""The roles a process can run, declared as data, and the one loop that starts, supervises and
stops them.

A role (`jobgate worker`, `jobgate reaper`, ...) is one or more loops. Each loop names how to
build its object from the process's parts (`Parts`); a supervised loop is rebuilt and restarted
after a crash with backoff (counted in jobgate_role_restarts_total), an unsupervised one ends
the process when it fails. A role's `needs` are opened once for the whole process before any
loop starts: provider credentials are checked (fail at start, not on the first job) and the
broker transport is connected.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import gc
import logging
import socket
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from jobgate import errors, transports
from jobgate.config import config_file
from jobgate.process.api_server import ApiServer
from jobgate.roles import relay as transport_relay
from jobgate.roles.dispatcher import Dispatcher
from jobgate.roles.supervisor import Role, RoleSupervisor
from jobgate.roles.worker import default_worker_id
from jobgate.services import config_reload, presence, rate_limits
from jobgate.transports.base import Transport, TransportUnavailable

if TYPE_CHECKING:
    from jobgate.process.runtime import Runtime

log = logging.getLogger(__name__)


class Need(enum.Enum):
    PROVIDER_CREDENTIALS = "provider credentials"  # every configured provider's key, checked
    BATCH_CREDENTIALS = "native batch credentials"  # the keys of providers with native_batches
    TRANSPORT = "transport"  # JOBGATE_TRANSPORT's broker, opened, and its relay


@dataclasses.dataclass(slots=True)
class Parts:
    """What loops are built from: the runtime's services and what the roles' needs opened."""

    runtime: Runtime
    sock: socket.socket | None = None  # the API's listening socket, bound by the caller
    transport: Transport | None = None  # None: JOBGATE_TRANSPORT=database, or not needed
    relay: transport_relay.Relay | None = None  # publishes "job ready" when there is a transport


@dataclasses.dataclass(frozen=True, slots=True)
class Loop:
    name: str  # the task's name and the restart metric's `role` label
    build: Callable[[Parts], Role | None]  # None: not needed in this process
    supervised: bool = True
    close: Callable[[Role], Coroutine[Any, Any, None]] | None = None  # after each run


@dataclasses.dataclass(frozen=True, slots=True)
class RoleSpec:
    name: str
    loops: tuple[Loop, ...]
    needs: frozenset[Need] = frozenset()


async def _close_dispatcher(role: Role) -> None:
    """The dispatcher holds an HTTP client for the webhook receivers."""
    if isinstance(role, Dispatcher):
        await role.aclose()


def _api(parts: Parts) -> Role:
    runtime = parts.runtime
    return ApiServer(runtime.app_context(), runtime.settings, sock=parts.sock)


def _worker(parts: Parts) -> Role:
    relay = parts.relay
    return parts.runtime.worker(
        transport=parts.transport, on_claimed=None if relay is None else relay.wake
    )


# In start order (`jobgate serve` runs them all). Builders call the runtime's factories at
# build time, so that a rebuilt role is a fresh object.
ROLE_TABLE: tuple[RoleSpec, ...] = (
    RoleSpec("api", (Loop("api", _api, supervised=False),)),
    RoleSpec(
        "worker",
        (
            Loop("transport-relay", lambda parts: parts.relay, supervised=False),
            Loop("worker", _worker),
        ),
        needs=frozenset({Need.PROVIDER_CREDENTIALS, Need.TRANSPORT}),
    ),
    RoleSpec(
        "reaper",
        (
            Loop("reaper", lambda parts: parts.runtime.reaper()),
            # Recurring schedules ride with the reaper.
            Loop("schedules", lambda parts: parts.runtime.schedules()),
        ),
    ),
    RoleSpec(
        "dispatcher",
        (Loop("dispatcher", lambda parts: parts.runtime.dispatcher(), close=_close_dispatcher),),
    ),
    RoleSpec(
        "reconciler",
        (Loop("reconciler", lambda parts: parts.runtime.reconciler()),),
        needs=frozenset({Need.PROVIDER_CREDENTIALS}),
    ),
    RoleSpec(
        "batches",
        (Loop("batches", lambda parts: parts.runtime.batch_runner()),),
        # It calls the batch APIs of the providers with native_batches, and no other.
        needs=frozenset({Need.BATCH_CREDENTIALS}),
    ),
)

ROLES: tuple[str, ...] = tuple(spec.name for spec in ROLE_TABLE)


def available_roles() -> tuple[str, ...]:
    """Every role, in start order (`jobgate serve` runs them all)."""
    return ROLES


def _chosen(roles: tuple[str, ...]) -> list[RoleSpec]:
    unknown = [r for r in roles if r not in ROLES]
    if unknown:
        raise errors.ConfigError(
            "roles", f"unknown role {unknown[0]!r} (one of {', '.join(ROLES)})"
        )
    return [spec for spec in ROLE_TABLE if spec.name in roles]


async def _open_transport(parts: Parts) -> None:
    runtime = parts.runtime
    transport = transports.for_settings(runtime.settings, consumer=default_worker_id())
    if transport is not None:
        try:
            await transport.open()
        except TransportUnavailable as exc:
            # A broker down at start is an outage like any other (transport_fallback decides).
            log.warning("broker unreachable at start: %s", exc.message)
        parts.transport = transport
        # Every worker process relays "job ready" messages.
        parts.relay = transport_relay.Relay(
            storage=runtime.storage,
            transport=transport,
            settings=runtime.settings,
            limits=runtime.limits,
            skip_providers=lambda: rate_limits.limited_providers(runtime.providers.configs()),
        )


def check_needs(runtime: Runtime, roles: tuple[str, ...]) -> None:
    """Raise errors.ConfigError when `roles` cannot start here: an unknown role, or a provider
    key that a role calling providers needs is not set (the batches role needs only those of
    the providers with native batches). Cheap and repeatable: a process runs it before it says
    it started, and run_roles again."""
    needs = {need for spec in _chosen(roles) for need in spec.needs}
    if Need.PROVIDER_CREDENTIALS in needs:
        runtime.providers.require_credentials()
    elif Need.BATCH_CREDENTIALS in needs:
        runtime.providers.require_credentials(native_batches=True)


def freeze_start_up_heap() -> None:
    """Keep what start-up built (modules, settings, the roles' objects) out of the cyclic
    garbage collector's full collections, once per process: otherwise each of them walks that
    whole heap, a fifth of a SQLite worker's CPU while it drains. Garbage
    left by start-up is collected first, so nothing but live objects is frozen."""
    if gc.get_freeze_count() == 0:
        gc.collect()
        gc.freeze()


async def run_roles(
    runtime: Runtime,
    roles: tuple[str, ...],
    stop: asyncio.Event,
    *,
    sock: socket.socket | None = None,
) -> None:
    """Run `roles` until `stop` is set, then shut each down gracefully. A loop that ends with
    an error (an unsupervised one, or a supervised one on a fatal error) stops them all and
    raises, so that the process exits non-zero."""
    chosen = _chosen(roles)
    needs = {need for spec in chosen for need in spec.needs}
    check_needs(runtime, roles)
    await runtime.storage.listen()
    parts = Parts(runtime=runtime, sock=sock)
    if Need.TRANSPORT in needs:
        await _open_transport(parts)
    running, tasks = _launch(chosen, parts, runtime)
    freeze_start_up_heap()
    stopped = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait([stopped, *tasks], return_when=asyncio.FIRST_COMPLETED)
    crashed = [task for task in done if task is not stopped and task.exception() is not None]
    for task in crashed:
        log.error("role %s crashed", task.get_name(), exc_info=task.exception())
    stop.set()
    for role in running:
        role.request_stop()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    stopped.cancel()
    runtime.presence.local.difference_update(spec.name for spec in chosen)
    if parts.transport is not None:
        await parts.transport.close()
    for task, result in zip(tasks, results, strict=True):
        if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
            log.error("role %s ended with %s", task.get_name(), type(result).__name__)
    if crashed:
        # Exit non-zero, so that a supervisor restarts the process instead of believing
        # it was stopped on purpose.
        raise errors.JobgateError(f"role {crashed[0].get_name()} crashed")


def _launch(
    chosen: list[RoleSpec], parts: Parts, runtime: Runtime
) -> tuple[list[Role], list[asyncio.Task[None]]]:
    """Start the presence heartbeat, every loop of the chosen roles and the configuration
    watcher: the roles running and their tasks."""
    tasks: list[asyncio.Task[None]] = []
    running: list[Role] = []
    # Every role but the API beats its presence, so that work no live process would take
    # says so (services.presence); the roles of this process are present to it at once.
    runtime.presence.local.update(spec.name for spec in chosen)
    beating = [spec.name for spec in chosen if spec.name != "api"]
    if beating:
        heartbeat = presence.Heartbeat(
            runtime.storage, runtime.settings, roles=beating, clock_=runtime.clock
        )
        running.append(heartbeat)
        tasks.append(asyncio.create_task(heartbeat.run(), name="presence"))
    for spec in chosen:
        for loop in spec.loops:
            role = _start(loop, parts, runtime)
            if role is not None:
                running.append(role)
                tasks.append(asyncio.create_task(role.run(), name=loop.name))
    if runtime.reload is not None:  # limits, caps and routes follow the configuration file
        watcher = config_reload.ConfigWatcher(
            path=config_file(), load=runtime.reload, apply=runtime.reconfigure
        )
        running.append(watcher)
        tasks.append(asyncio.create_task(watcher.run(), name="config-watcher"))
    return running, tasks


def _start(loop: Loop, parts: Parts, runtime: Runtime) -> Role | None:
    """The loop's role, wrapped in a RoleSupervisor when supervised; None when not needed."""
    if not loop.supervised:
        return loop.build(parts)

    def build() -> Role:
        role = loop.build(parts)
        assert role is not None, f"supervised loop {loop.name} has nothing to run"
        return role

    supervisor = RoleSupervisor(loop.name, build, clock=runtime.clock, close=loop.close)
    runtime.supervisors[loop.name] = supervisor
    return supervisor
