"""Helpers the CLI modules share: loading settings, running a coroutine against a runtime."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from jobgate import config, logs
from jobgate.config import Settings
from jobgate.services.runtime import Runtime

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

    logs.configure("warning")
    return asyncio.run(run())


def emit(data: Any, *, as_json: bool, text: str) -> None:
    click.echo(json.dumps(data, indent=2, default=str) if as_json else text)


def credentials_path(settings: Settings | None = None) -> Path:
    if settings is not None and settings.credentials_path:
        return Path(settings.credentials_path)
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(Path.home(), ".config")
    return Path(base) / "jobgate" / "credentials.json"


def save_credentials(path: Path, url: str, api_key: str, tenant: str) -> None:
    """Remember a server's key for the CLI (file mode 0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError):
        saved = {}
    saved[url] = {"api_key": api_key, "tenant": tenant}
    temporary = path.with_suffix(".tmp")
    with open(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as handle:
        json.dump(saved, handle, indent=2)
    os.replace(temporary, path)


def load_credentials(url: str, settings: Settings | None = None) -> dict[str, str] | None:
    try:
        saved = json.loads(credentials_path(settings).read_text())
    except (OSError, ValueError):
        return None
    entry = saved.get(url.rstrip("/"))
    return entry if isinstance(entry, dict) else None
