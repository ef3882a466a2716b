"""What the registry says when it cannot route a job: in English, naming the providers, and
saying so when the provider that would serve it was added to the file after the start."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobgate import errors
from jobgate.config import Settings, load_settings
from jobgate.providers.registry import ProviderRegistry
from jobgate.testing import FakeClock

UPSTREAM = """
[providers.upstream]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
models = ["gpt-4.1-mini"]
"""


def settings_of(text: str, tmp_path: Path) -> Settings:
    path = tmp_path / "jobgate.toml"
    path.write_text(text)
    return load_settings({}, config_path=path)


def test_a_model_no_provider_serves_reads_as_english(tmp_path: Path) -> None:
    registry = ProviderRegistry.from_settings(settings_of("", tmp_path), clock=FakeClock())
    with pytest.raises(errors.InvalidRequest) as caught:
        registry.route(None, "gpt-4o")
    assert caught.value.code == "model_not_found"
    assert str(caught.value).startswith("no configured provider serves model 'gpt-4o'; ")
    assert "by no" not in str(caught.value)
    with pytest.raises(
        errors.InvalidRequest, match=r"^provider 'sim' does not serve model 'gpt-4o'"
    ):
        registry.route("sim", "gpt-4o")


def test_a_provider_added_while_running_asks_for_a_restart(tmp_path: Path) -> None:
    registry = ProviderRegistry.from_settings(settings_of("", tmp_path), clock=FakeClock())
    registry.reconfigure(settings_of(UPSTREAM, tmp_path))
    with pytest.raises(errors.InvalidRequest) as caught:
        registry.route(None, "gpt-4.1-mini")
    message = str(caught.value)
    assert caught.value.code == "model_not_found"
    assert "provider 'upstream'" in message and "restart jobgate to use it" in message
    with pytest.raises(errors.UnknownProvider, match="restart jobgate to use it"):
        registry.route("upstream", "gpt-4.1-mini")
    with pytest.raises(errors.InvalidRequest) as other:
        registry.route(None, "claude-x")  # no provider, added or not, serves this one
    assert "restart" not in str(other.value)
    with pytest.raises(errors.UnknownProvider) as unknown:
        registry.route("nobody", "m")
    assert str(unknown.value) == "unknown provider 'nobody'"
