"""Server commands: serve (every role in one process), one command per role, migrate."""

from __future__ import annotations

import asyncio
import functools
import signal
import socket
import sys
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import click
import prometheus_client

import jobgate
from jobgate import database_urls, logs, transports
from jobgate.cli import startup_checks
from jobgate.cli.common import credentials_path, load
from jobgate.client import credentials
from jobgate.config import Settings
from jobgate.process import roles as process_roles
from jobgate.process.roles import ROLES, available_roles
from jobgate.process.runtime import Runtime

T = TypeVar("T")


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _storage_label(settings: Settings) -> str:
    url = settings.database_url
    if url.startswith("sqlite:"):
        return f"sqlite {url.split('sqlite://', 1)[1].lstrip('/') or url}"
    return "postgresql " + url.rsplit("@", 1)[-1]  # never print a password


async def _run(
    settings: Settings, roles: tuple[str, ...], reload: Callable[[], Settings] | None = None
) -> None:
    # The start line says the process runs, so it comes only once every check passed: the
    # broker's client installed, the port bound, the database open and migrated, the roles'
    # provider keys present. Anything wrong is one line on stderr instead, and no key is issued.
    transports.require_client(settings.transport)
    sock = _bind(settings.host, settings.port) if "api" in roles else None
    runtime = Runtime(settings, reload=reload)
    try:
        await runtime.open(migrate=True)
        process_roles.check_needs(runtime, roles)
        if sock is not None:
            url = f"http://{settings.host}:{sock.getsockname()[1]}"
            click.echo(
                f"jobgate {jobgate.__version__} listening on {url} "
                f"({_storage_label(settings)}; roles: {', '.join(roles)})"
            )
            await _first_keys(runtime, settings, url)
        else:
            click.echo(
                f"jobgate {jobgate.__version__} running {', '.join(roles)} "
                f"({_storage_label(settings)})"
            )
            if settings.metrics_port:
                prometheus_client.start_http_server(settings.metrics_port, addr=settings.host)
        await startup_checks.warn(runtime, roles)
        sys.stdout.flush()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await runtime.run_roles(roles, stop, sock=sock)
    finally:
        if sock is not None:
            sock.close()
        await runtime.close()


async def _first_keys(runtime: Runtime, settings: Settings, url: str) -> None:
    """On first start: the default tenant's key and the first operator key, shown once and
    saved for this server's URL (so the CLI and a second local server do not mix them up),
    with the server's database."""
    issued = await runtime.tenants.ensure_default()
    operator_key = await runtime.operators.ensure_first()
    path = credentials_path(settings)
    # The database too, at every start: the operator commands open it from any directory.
    credentials.save(
        path,
        url,
        api_key=issued.api_key if issued else None,
        tenant=issued.tenant.name if issued else None,
        operator_key=operator_key,
        database_url=database_urls.absolute(settings.database_url),
    )
    if issued is not None:
        click.echo(
            f"Created tenant 'default'. Its API key, shown once "
            f"(saved to {path}):\n\n    {issued.api_key}\n"
        )
        click.echo(
            f"Try:\n    jobgate submit -m hello --wait\n    curl -s {url}/v1/jobs "
            f"-H 'Authorization: Bearer {issued.api_key}' -H 'Content-Type: application/json' -d "
            '\'{"endpoint": "/v1/chat/completions", "body": {"model": '
            '"sim-echo", "messages": [{"role": "user", "content": '
            '"hello"}]}}\'\n'
        )
    if operator_key is not None:
        click.echo(
            f"Operator key for the dashboard ({url}/dashboard), shown once "
            f"(saved to {path}):\n\n    {operator_key}\n"
        )


def configure_logs(settings: Settings) -> None:
    logs.configure(
        settings.log_level, log_format=settings.log_format, access_log=settings.access_log
    )


def run_server(main: Coroutine[Any, Any, T]) -> T:
    """Run a server process's main coroutine on uvloop where it is installed (it comes with
    uvicorn[standard]; C transports and a faster loop), else on asyncio's own loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


def _start(roles: tuple[str, ...], **overrides: object) -> None:
    settings = load(**overrides)
    configure_logs(settings)
    run_server(_run(settings, roles, lambda: load(**overrides)))


def _parse_roles(value: str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    roles = tuple(part.strip() for part in value.split(",") if part.strip())
    for role in roles:
        if role not in ROLES:
            raise click.BadParameter(f"unknown role {role!r} (one of {', '.join(ROLES)})")
    return roles


# What `jobgate worker` runs: every role whose work a worker's deployment has (a batch needs
# the batches role as much as its requests need a worker, and nothing else starts it).
WORKER_ROLES = ("worker", "batches")

_host = click.option("--host", help="Interface to listen on (JOBGATE_HOST, default 127.0.0.1).")
_port = click.option("--port", type=int, help="Port (JOBGATE_PORT, default 8000; 0 picks one).")
_db = click.option(
    "--database-url", help="sqlite:///path or postgresql://… (JOBGATE_DATABASE_URL)."
)


@click.command()
@_host
@_port
@_db
@click.option("--roles", help=f"Comma-separated subset of: {', '.join(ROLES)}.")
def serve(host: str | None, port: int | None, database_url: str | None, roles: str | None) -> None:
    """Run every role in one process (SQLite and the simulated provider by default)."""
    settings = load(host=host, port=port, database_url=database_url)
    chosen = _parse_roles(roles) or settings.roles or available_roles()
    configure_logs(settings)
    reload = functools.partial(load, host=host, port=port, database_url=database_url)
    run_server(_run(settings, chosen, reload))


@click.command()
@_host
@_port
@_db
def api(host: str | None, port: int | None, database_url: str | None) -> None:
    """Run only the HTTP API."""
    _start(("api",), host=host, port=port, database_url=database_url)


@click.command()
@_db
@click.option("--concurrency", type=int, help="Jobs at once (JOBGATE_WORKER_CONCURRENCY).")
def worker(database_url: str | None, concurrency: int | None) -> None:
    """Run a worker, with the batches role (it turns batch files into jobs and back).

    `jobgate serve --roles worker` runs the worker alone."""
    _start(WORKER_ROLES, database_url=database_url, worker_concurrency=concurrency)


@click.command()
@_db
def reaper(database_url: str | None) -> None:
    """Run only the reaper."""
    _start(("reaper",), database_url=database_url)


@click.command()
@_db
def migrate(database_url: str | None) -> None:
    """Apply pending database migrations."""
    settings = load(database_url=database_url)

    async def run() -> tuple[list[int], int]:
        runtime = Runtime(settings)
        await runtime.open(migrate=False)
        try:
            applied = await runtime.storage.migrate()
            return applied, await runtime.storage.schema_version()
        finally:
            await runtime.close()

    logs.configure("warning")
    applied, version = asyncio.run(run())
    if applied:
        click.echo(f"applied migrations {', '.join(map(str, applied))}; schema at {version}")
    else:
        click.echo(f"schema up to date at {version}")


@click.command()
@_db
def reconciler(database_url: str | None) -> None:
    """Run only the reconciler: status checks, cancels and settlements of background jobs."""
    _start(("reconciler",), database_url=database_url)


COMMANDS = (serve, api, worker, reaper, reconciler, migrate)
