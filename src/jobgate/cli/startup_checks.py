"""Warnings a server process prints once at start, about setups that would fail in silence."""

from __future__ import annotations

import logging

from jobgate.process.runtime import Runtime
from jobgate.services import presence

log = logging.getLogger("jobgate.startup")


async def warn(runtime: Runtime, roles: tuple[str, ...]) -> None:
    """An API or worker without a reconciler in the same process, while a background-mode
    provider is configured and no reconciler has beaten recently: its jobs would stay running."""
    if "reconciler" in roles or not {"api", "worker"} & set(roles):
        return
    missing = await presence.reconciler_missing(runtime.storage, runtime.settings)
    if missing is not None:
        log.warning("%s; start one", missing, extra={"roles": list(roles)})
