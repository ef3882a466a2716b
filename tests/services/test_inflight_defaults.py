"""The defaults for long calls are the documented ones: hundreds of calls in flight per worker
process, and a provider cap that lets one provider fill them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jobgate.config import ProviderConfig, Settings, load_settings
from jobgate.providers.gates import ProviderGates

ROOT = Path(__file__).resolve().parents[2]


def _documented(path: Path, name: str) -> int:
    """The default column of the Markdown table row that names `name`."""
    for line in path.read_text().splitlines():
        if line.startswith(f"| `{name}`"):
            return int(re.sub(r"[^0-9]", "", line.rstrip(" |").rsplit("|", 1)[1]))
    raise AssertionError(f"{name} is not in a table of {path.name}")


def test_worker_concurrency_default_is_the_documented_number(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no jobgate.toml here
    settings = load_settings({})
    assert settings.worker_concurrency == 512
    assert settings.worker_concurrency == _documented(
        ROOT / "README.md", "JOBGATE_WORKER_CONCURRENCY"
    )
    assert settings.database_pool_size == _documented(
        ROOT / "README.md", "JOBGATE_DATABASE_POOL_SIZE"
    )


def test_provider_concurrency_default_matches_the_worker_and_the_docs() -> None:
    settings = Settings()
    documented = _documented(ROOT / "docs" / "providers.md", "concurrency")
    for config in settings.all_providers().values():  # the built-in sim included
        assert config.concurrency == documented == settings.worker_concurrency
    gates = ProviderGates(settings.all_providers())
    gate = gates.gate("sim")
    assert gate is not None and gate.room(10_000) == 512


def test_provider_concurrency_is_set_per_provider_in_the_file(tmp_path: Path) -> None:
    config = tmp_path / "jobgate.toml"
    config.write_text(
        '[providers.slow]\nkind = "openai"\nbase_url = "http://127.0.0.1:9/v1"\n'
        "concurrency = 8\n"
        '[providers.wide]\nkind = "openai"\nbase_url = "http://127.0.0.1:9/v1"\n'
    )
    settings = load_settings({}, config_path=config)
    assert settings.providers["slow"].concurrency == 8
    assert settings.providers["wide"].concurrency == ProviderConfig(kind="sim").concurrency
    gate = ProviderGates(settings.all_providers()).gate("slow")
    assert gate is not None and gate.room(100) == 8
