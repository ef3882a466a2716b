"""Hot reload of traffic settings: what a changed file changes in a running
process (rate limits, concurrency caps, routes, tenant limits), what waits for a restart,
and a broken file refused with the running settings kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobgate import errors, metrics
from jobgate.config import Settings, load_settings
from jobgate.providers.registry import ProviderRegistry
from jobgate.services import config_reload, rate_limits
from jobgate.services.config_reload import ConfigWatcher
from jobgate.testing import FakeClock

BASE = """
[providers.up]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
rpm = 60
concurrency = 4

[providers.other]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"

[routes."smart"]
targets = ["up:m1"]

[tenants.acme]
max_running = 2
"""


def settings_of(text: str, tmp_path: Path) -> Settings:
    path = tmp_path / "jobgate.toml"
    path.write_text(text)
    return load_settings({}, config_path=path)


def test_limits_caps_and_routes_change_in_the_running_registry(tmp_path: Path) -> None:
    clock = FakeClock()
    registry = ProviderRegistry.from_settings(settings_of(BASE, tmp_path), clock=clock)
    limiter = rate_limits.RateLimiter(storage=None, configs=registry.configs())  # type: ignore[arg-type]
    changed = BASE.replace("rpm = 60", "rpm = 600\ntpm = 1000").replace(
        "concurrency = 4", "concurrency = 9"
    )
    changed = changed.replace('targets = ["up:m1"]', 'targets = ["other:m2", "up:m1"]')
    registry.reconfigure(settings_of(changed, tmp_path))
    assert registry.version == 1
    assert (registry.config("up").rpm, registry.config("up").tpm) == (600, 1000)
    gate = registry.gates.gate("up")
    assert gate is not None and gate.cap == 9
    assert registry.first_target("smart") == ("other", "m2")
    limiter.reconfigure(registry.configs())
    (target,) = limiter.targets("up")
    assert [(b.rpm, b.tpm) for b in target.buckets] == [(600, 1000)]


def test_a_route_to_nothing_is_refused_and_nothing_changes(tmp_path: Path) -> None:
    registry = ProviderRegistry.from_settings(settings_of(BASE, tmp_path), clock=FakeClock())
    broken = BASE.replace('targets = ["up:m1"]', 'targets = ["missing:m1"]').replace(
        "rpm = 60", "rpm = 1"
    )
    with pytest.raises(errors.ConfigError, match=r"routes\.smart\.targets"):
        registry.reconfigure(settings_of(broken, tmp_path))
    assert registry.config("up").rpm == 60 and registry.version == 0


def test_what_only_a_restart_applies_is_named(tmp_path: Path) -> None:
    running = settings_of(BASE, tmp_path)
    wanted = settings_of(
        BASE.replace("rpm = 60", "rpm = 1").replace("127.0.0.1:9", "127.0.0.1:10", 1)
        + "\n[providers.new]\nkind = 'sim'\n",
        tmp_path,
    )
    assert config_reload.needing_restart(running, wanted) == ["providers.new", "providers.up"]
    assert config_reload.needing_restart(running, settings_of(BASE, tmp_path)) == []


def test_the_watcher_applies_a_changed_file_and_refuses_a_broken_one(tmp_path: Path) -> None:
    path = tmp_path / "jobgate.toml"
    path.write_text(BASE)
    applied: list[Settings] = []
    watcher = ConfigWatcher(
        path=path, load=lambda: load_settings({}, config_path=path), apply=applied.append
    )
    assert not watcher.check()  # unchanged since it started
    path.write_text(BASE.replace("rpm = 60", "rpm = 120"))
    assert watcher.check() and applied[-1].providers["up"].rpm == 120
    assert not watcher.check()
    refused = metrics.CONFIG_RELOADS.labels("refused")._value.get()
    path.write_text(BASE.replace("rpm = 60", "rpm = -5"))
    assert not watcher.check()
    assert len(applied) == 1  # the running settings stay
    assert metrics.CONFIG_RELOADS.labels("refused")._value.get() == refused + 1
