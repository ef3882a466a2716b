"""Helpers the CLI modules share: loading settings, running a coroutine against a runtime."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from jobgate import config, logs
from jobgate.client import credentials
from jobgate.config import Settings
from jobgate.process.runtime import Runtime

T = TypeVar("T")


def load(**overrides: Any) -> Settings:
    """Settings from jobgate.toml and JOBGATE_*, with command-line options on top."""
    return config.load_settings(**{k: v for k, v in overrides.items() if v is not None})


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
