"""jobgate.toml's traffic control tables: rate limits, per-model limits, routes and
per-key caps load; a misspelt key is refused with the closest name."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobgate import errors
from jobgate.config import DEFAULT_MAX_OUTPUT_TOKENS, load_settings

TRAFFIC = """
[providers.upstream]
kind = "openai"
base_url = "http://127.0.0.1:9100/v1"
rpm = 500
tpm = 200000

[providers.upstream.model_limits."gpt-4.1"]
rpm = 60
tpm = 30000

[routes."smart"]
targets = ["upstream:gpt-4.1", "sim:sim-echo"]
move_after_retry_after_s = 5

[tenants.acme]
max_running_per_key = 2
"""


def test_traffic_tables_load(tmp_path: Path) -> None:
    config = tmp_path / "jobgate.toml"
    config.write_text(TRAFFIC)
    settings = load_settings({}, config_path=config)
    upstream = settings.providers["upstream"]
    assert (upstream.rpm, upstream.tpm) == (500, 200_000)
    assert upstream.model_limits["gpt-4.1"].rpm == 60
    assert settings.routes["smart"].pairs() == [("upstream", "gpt-4.1"), ("sim", "sim-echo")]
    assert settings.limits_for("acme").max_running_per_key == 2


def test_output_bounds_load_per_provider_and_per_model(tmp_path: Path) -> None:
    config = tmp_path / "jobgate.toml"
    config.write_text(
        TRAFFIC.replace("tpm = 200000\n", "tpm = 200000\nmax_output_tokens = 32768\n", 1).replace(
            "tpm = 30000\n", "tpm = 30000\nmax_output_tokens = 16384\n", 1
        )
    )
    settings = load_settings({}, config_path=config)
    upstream = settings.providers["upstream"]
    assert upstream.output_bound("gpt-4.1") == 16_384
    assert upstream.output_bound("gpt-4.1-mini") == upstream.output_bound(None) == 32_768
    assert settings.all_providers()["sim"].output_bound("sim-echo") == DEFAULT_MAX_OUTPUT_TOKENS


@pytest.mark.parametrize("bound", ["0", "-1", "2147483648", "1.5", '"many"'])
def test_an_output_bound_out_of_range_is_refused(tmp_path: Path, bound: str) -> None:
    config = tmp_path / "jobgate.toml"
    config.write_text(TRAFFIC.replace("rpm = 60\n", f"rpm = 60\nmax_output_tokens = {bound}\n"))
    with pytest.raises(errors.ConfigError, match="max_output_tokens"):
        load_settings({}, config_path=config)


@pytest.mark.parametrize(
    ("wrong", "suggested"),
    [
        ("rpm = 500", "rpms = 500"),
        ("max_running_per_key = 2", "max_running_per_keys = 2"),
        ("move_after_retry_after_s = 5", "move_after_retry_s = 5"),
    ],
)
def test_misspelt_traffic_keys_are_refused(tmp_path: Path, wrong: str, suggested: str) -> None:
    config = tmp_path / "jobgate.toml"
    config.write_text(TRAFFIC.replace(wrong, suggested, 1))
    with pytest.raises(errors.ConfigError, match="did you mean"):
        load_settings({}, config_path=config)


def test_negative_limits_are_refused(tmp_path: Path) -> None:
    config = tmp_path / "jobgate.toml"
    config.write_text(TRAFFIC.replace("rpm = 60", "rpm = -1"))
    with pytest.raises(errors.ConfigError, match="rpm"):
        load_settings({}, config_path=config)
