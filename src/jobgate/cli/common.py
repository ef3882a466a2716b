"""Helpers the CLI modules share: loading settings, running a coroutine against a runtime."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from jobgate import config, database_urls, logs
from jobgate.client import credentials
from jobgate.config import Settings
from jobgate.process.runtime import Runtime

T = TypeVar("T")


def load(**overrides: Any) -> Settings:
    """Settings from jobgate.toml and JOBGATE_*, with command-line options on top."""
    return config.load_settings(**{k: v for k, v in overrides.items() if v is not None})


def load_for_operator(database_url: str | None) -> Settings:
    """Settings for a command that opens the server's database itself (tenants, keys,
    operators): --database-url, JOBGATE_DATABASE_URL or jobgate.toml when one names it, else
    the database `jobgate serve` saved for the server at JOBGATE_URL (127.0.0.1:8000 by
    default), else ./jobgate.db when it exists. Never a new, empty ./jobgate.db: a command run
    from another directory would create one and then find no tenant in it."""
    settings = load(database_url=database_url)
    if "database_url" in settings.model_fields_set:
        return settings
    server = os.environ.get("JOBGATE_URL") or credentials.DEFAULT_URL
    saved = (load_credentials(server, settings) or {}).get("database_url")
    if saved:
        return settings.model_copy(update={"database_url": saved})
    if os.path.exists(database_urls.DEFAULT_SQLITE_PATH):
        return settings
    raise click.ClickException(
        f"which database? `jobgate serve` saved none for {credentials.normal_url(server)} "
        f"(JOBGATE_URL) and there is no ./{database_urls.DEFAULT_SQLITE_PATH} here: set "
        "JOBGATE_DATABASE_URL or pass --database-url"
    )


def with_runtime(settings: Settings, work: Callable[[Runtime], Awaitable[T]]) -> T:
    async def run() -> T:
        runtime = Runtime(settings)
        await runtime.open(migrate=True)
        try:
            return await work(runtime)
        finally:
            await runtime.close()

    logs.configure("error")  # a one-shot command's output is its answer, not log lines
    return asyncio.run(run())


def emit(data: Any, *, as_json: bool, text: str) -> None:
    click.echo(json.dumps(data, indent=2, default=str) if as_json else text)


def credentials_path(settings: Settings | None = None) -> Path:
    if settings is not None and settings.credentials_path:
        return Path(settings.credentials_path)
    return credentials.credentials_path()


def load_credentials(url: str, settings: Settings | None = None) -> dict[str, str] | None:
    return credentials.saved_entry(url, path=credentials_path(settings)) or None
