"""ProviderRegistry.route keeps its answers per (provider, model, api): a repeat costs a dict
lookup, a model route still picks by the breakers of the moment, and a reloaded file (or a
flood of distinct model names) leaves no stale or unbounded cache behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobgate import errors
from jobgate.config import Settings, load_settings
from jobgate.providers import registry as registry_module
from jobgate.providers.registry import ProviderRegistry
from jobgate.testing import FakeClock

BASE = """
[providers.up]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"

[providers.other]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"

[routes."smart"]
targets = ["other:m2", "up:m1"]
"""


def settings_of(text: str, tmp_path: Path) -> Settings:
    path = tmp_path / "jobgate.toml"
    path.write_text(text)
    return load_settings({}, config_path=path)


def counting(registry: ProviderRegistry, monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Record each computed (not cached) route."""
    computed: list[object] = []
    compute = registry._route

    def spy(provider: str | None, model: str | None, api: str) -> object:
        computed.append((provider, model, api))
        return compute(provider, model, api)

    monkeypatch.setattr(registry, "_route", spy)
    return computed


def test_a_repeat_is_answered_from_the_cache_until_a_reload(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = ProviderRegistry.from_settings(settings_of(BASE, tmp_path), clock=FakeClock())
    computed = counting(registry, monkeypatch)
    first = registry.route("up", "m1")
    assert registry.route("up", "m1") == first and first[0].name == "up"
    assert registry.route("up", "m1", api="responses")[0] is not first[0]  # the api is keyed
    assert len(computed) == 2
    registry.reconfigure(settings_of(BASE, tmp_path))
    assert registry.route("up", "m1") == first
    assert len(computed) == 3  # the reload emptied the cache


def test_a_model_route_follows_the_breakers_and_the_reloaded_targets(tmp_path: Path) -> None:
    registry = ProviderRegistry.from_settings(settings_of(BASE, tmp_path), clock=FakeClock())
    assert registry.route(None, "smart")[0].name == "other"
    registry.gates.apply_shared({"other": 60.0})  # another process opened its breaker
    assert registry.route(None, "smart") == (registry.get("up"), "m1")
    registry.gates.apply_shared({})
    assert registry.route(None, "smart")[0].name == "other"
    registry.reconfigure(settings_of(BASE.replace('"other:m2", ', ""), tmp_path))
    assert registry.route(None, "smart") == (registry.get("up"), "m1")


def test_a_model_that_becomes_a_route_on_reload_is_routed_as_one(tmp_path: Path) -> None:
    registry = ProviderRegistry.from_settings(settings_of(BASE, tmp_path), clock=FakeClock())
    with pytest.raises(errors.InvalidRequest) as caught:  # the default `sim` serves sim-* only
        registry.route(None, "fast")
    assert caught.value.code == "model_not_found"
    changed = BASE + '\n[routes."fast"]\ntargets = ["up:m1"]\n'
    registry.reconfigure(settings_of(changed, tmp_path))
    assert registry.route(None, "fast") == (registry.get("up"), "m1")


def test_refusals_are_not_kept_and_the_cache_stays_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = ProviderRegistry.from_settings(settings_of(BASE, tmp_path), clock=FakeClock())
    computed = counting(registry, monkeypatch)
    for _ in range(2):
        with pytest.raises(errors.UnknownProvider):
            registry.route("nobody", "m1")
    assert len(computed) == 2
    monkeypatch.setattr(registry_module, "_ROUTES_KEPT", 8)
    for n in range(50):
        registry.route("up", f"model-{n}")
    assert len(registry._routed) <= 8
