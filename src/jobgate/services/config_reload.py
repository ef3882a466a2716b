"""Hot reload of traffic settings: every jobgate process watches its configuration
file (`$JOBGATE_CONFIG`, else `./jobgate.toml`) and, when the file's modification time or
size changes, reads it again and applies what can change under running workers:

- `[providers.NAME]` `rpm`, `tpm`, `model_limits` (shared rate limits), `concurrency` and
  `max_output_tokens` (the output bound checked at submit);
- `[routes."ALIAS"]` (model routes and their fallbacks);
- `[tenants.NAME]` and `[tenant_defaults]` (`max_running`, `max_running_per_key`, `weight`,
  `max_queued`, budgets, ...).

Why the file's mtime and not SIGHUP: every process of a deployment (`jobgate serve`, each
`jobgate worker`, each `jobgate api`) picks the change up by itself, with nothing to signal,
and an editor's save is enough. A file that no longer parses or validates is refused with an
error in the log; the running settings stay. Anything else that changed (a provider added,
its `base_url` or key, the database, ...) is named in a warning and waits for a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path

from jobgate import errors, metrics
from jobgate.config import Settings

log = logging.getLogger(__name__)

RELOADABLE_SETTINGS = ("providers", "routes", "tenants", "tenant_defaults")
DEFAULT_INTERVAL_S = 1.0


def needing_restart(running: Settings, wanted: Settings) -> list[str]:
    """The settings that differ between the two and only apply on a restart, by name."""
    names = [
        field
        for field in Settings.model_fields
        if field not in RELOADABLE_SETTINGS and getattr(running, field) != getattr(wanted, field)
    ]
    old, new = running.all_providers(), wanted.all_providers()
    names += [f"providers.{n}" for n in sorted(set(old) ^ set(new))]
    names += [
        f"providers.{name}"
        for name in sorted(set(old) & set(new))
        if old[name].reloaded(new[name]) != new[name]
    ]
    return names


class ConfigWatcher:
    """Checks `path` every `interval_s`; on a change, `load()`s the settings again and hands
    them to `apply` (which raises errors.ConfigError to refuse them)."""

    def __init__(
        self,
        *,
        path: Path,
        load: Callable[[], Settings],
        apply: Callable[[Settings], None],
        interval_s: float = DEFAULT_INTERVAL_S,
    ) -> None:
        self._path = path
        self._load = load
        self._apply = apply
        self._interval_s = interval_s
        self._seen = self._signature()
        self._stop = asyncio.Event()

    def _signature(self) -> tuple[int, int] | None:
        try:
            stat = self._path.stat()
        except OSError:
            return None
        return stat.st_mtime_ns, stat.st_size

    def check(self) -> bool:
        """Reload if the file changed since the last check; True when new settings applied."""
        signature = self._signature()
        if signature == self._seen or signature is None:
            return False
        self._seen = signature
        try:
            settings = self._load()
            self._apply(settings)
        except errors.ConfigError as exc:
            metrics.CONFIG_RELOADS.labels("refused").inc()
            log.error("configuration not reloaded, the running one stays: %s", exc)
            return False
        metrics.CONFIG_RELOADS.labels("applied").inc()
        log.info("configuration reloaded", extra={"path": str(self._path)})
        return True

    def request_stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), timeout=self._interval_s)
            if not self._stop.is_set():
                self.check()
