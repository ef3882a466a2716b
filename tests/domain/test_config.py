"""Settings: defaults, jobgate.toml, JOBGATE_* variables; bad values name the setting."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from jobgate import errors
from jobgate.config import load_settings
from jobgate.domain import costs


def test_defaults_match_the_design(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no jobgate.toml here
    settings = load_settings({})
    assert settings.database_url == "sqlite:///./jobgate.db"
    assert (settings.lease_ttl_s, settings.heartbeat_interval_s) == (60, 15)
    assert settings.reaper_interval_s == 30 and settings.worker_concurrency == 512
    assert settings.max_body_bytes == 1024 * 1024
    assert settings.webhook_retry_profile == "standard" and settings.unknown_outcome == "fail"
    assert settings.retention_s == 7 * 86400 and settings.idempotency_ttl_s >= 86400
    assert "sim" in settings.all_providers()


def test_environment_overrides_the_file(tmp_path: Path) -> None:
    config = tmp_path / "jobgate.toml"
    config.write_text(
        "lease_ttl_s = 30\nheartbeat_interval_s = 5\n"
        '[providers.upstream]\nkind = "openai"\nbase_url = "http://127.0.0.1:9/v1"\n'
        'api_key_env = "UPSTREAM_KEY"\nmodels = ["gpt-4.1-mini"]\n'
        "[tenants.acme]\nmax_running = 8\n"
    )
    settings = load_settings(
        {
            "JOBGATE_LEASE_TTL_S": "45",
            "JOBGATE_WEBHOOK_ALLOW_HTTP": "1",
            "JOBGATE_WEBHOOK_ALLOW_CIDRS": "127.0.0.0/8, 10.0.0.0/8",
        },
        config_path=config,
    )
    assert settings.lease_ttl_s == 45 and settings.heartbeat_interval_s == 5
    assert settings.webhook_allow_http is True
    assert settings.webhook_allow_cidrs == ("127.0.0.0/8", "10.0.0.0/8")
    assert settings.providers["upstream"].models == ("gpt-4.1-mini",)
    assert settings.limits_for("acme").max_running == 8
    assert settings.limits_for("someone").max_running == 0


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"JOBGATE_LEASE_TTL_S": "-1"}, "JOBGATE_LEASE_TTL_S"),
        ({"JOBGATE_LEASE_TTL_S": "soon"}, "JOBGATE_LEASE_TTL_S"),
        ({"JOBGATE_WEBHOOK_RETRY_PROFILE": "forever"}, "JOBGATE_WEBHOOK_RETRY_PROFILE"),
        ({"JOBGATE_UNKNOWN_OUTCOME": "pray"}, "JOBGATE_UNKNOWN_OUTCOME"),
        ({"JOBGATE_HEARTBEAT_INTERVAL_S": "90"}, "heartbeat_interval_s"),
        ({"JOBGATE_RETENTION_S": "60"}, "retention_s"),
        ({"JOBGATE_PARTITIONS_AHEAD_DAYS": "0"}, "JOBGATE_PARTITIONS_AHEAD_DAYS"),
    ],
)
def test_bad_values_name_the_setting(env: dict[str, str], named: str) -> None:
    with pytest.raises(errors.ConfigError) as caught:
        load_settings(env)
    assert named in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_short_retention_names_the_development_webhook_profile() -> None:
    with pytest.raises(errors.ConfigError) as caught:
        load_settings({"JOBGATE_RETENTION_S": "60"})
    assert "JOBGATE_WEBHOOK_RETRY_PROFILE=short" in str(caught.value)
    assert "Value error" not in str(caught.value)
    short = {"JOBGATE_RETENTION_S": "60", "JOBGATE_WEBHOOK_RETRY_PROFILE": "short"}
    assert load_settings(short).retention_s == 60


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("mysql://user@db/jobgate", "mysql is not supported"),
        ("MariaDB://user@db/jobgate", "mariadb is not supported"),
        ("sqlite:jobgate.db", "did you mean 'sqlite:///jobgate.db'?"),
        ("sqlite://jobgate.db", "did you mean 'sqlite:///jobgate.db'?"),
        ("sqlite:///", "names no file"),
        ("jobgate.db", "is not a database URL"),
    ],
)
def test_a_database_url_jobgate_cannot_open_is_refused_by_name(url: str, said: str) -> None:
    with pytest.raises(errors.ConfigError) as caught:
        load_settings({"JOBGATE_DATABASE_URL": url})
    message = str(caught.value)
    assert message.startswith("JOBGATE_DATABASE_URL: ") and said in message
    assert "postgresql" not in message.split(":", 1)[1].split("(")[0]  # not called postgresql
    with pytest.raises(errors.ConfigError, match=r"^--database-url: "):
        load_settings({}, database_url=url)


@pytest.mark.parametrize(
    "url", ["sqlite:///jobgate.db", "sqlite:////var/lib/jobgate.db", "postgresql://u@h/d"]
)
def test_the_database_urls_jobgate_opens_are_taken(url: str) -> None:
    assert load_settings({"JOBGATE_DATABASE_URL": url}).database_url == url


def test_the_listen_url_is_postgresql_beside_postgresql() -> None:
    pg = "postgresql://u@pooler:6432/d"
    settings = load_settings({
        "JOBGATE_DATABASE_URL": pg, "JOBGATE_LISTEN_DATABASE_URL": "postgres://u@primary/d"
    })  # fmt: skip
    assert settings.listen_database_url == "postgres://u@primary/d"
    unset = load_settings({"JOBGATE_DATABASE_URL": pg, "JOBGATE_LISTEN_DATABASE_URL": ""})
    assert unset.listen_database_url is None
    with pytest.raises(errors.ConfigError, match=r"^JOBGATE_LISTEN_DATABASE_URL: .*PostgreSQL"):
        load_settings({"JOBGATE_DATABASE_URL": pg, "JOBGATE_LISTEN_DATABASE_URL": "sqlite:///r"})
    with pytest.raises(errors.ConfigError, match="needs a PostgreSQL database_url"):
        load_settings({"JOBGATE_LISTEN_DATABASE_URL": pg})


def test_a_read_replica_url_and_its_lag_bound() -> None:
    """JOBGATE_READ_DATABASE_URL: a PostgreSQL URL beside a PostgreSQL database (empty: not
    set); JOBGATE_READ_MAX_LAG_S: a positive number of seconds, at most 60."""
    pg = "postgresql://u@primary/d"
    settings = load_settings({
        "JOBGATE_DATABASE_URL": pg, "JOBGATE_READ_DATABASE_URL": "postgresql://u@replica/d",
        "JOBGATE_READ_MAX_LAG_S": "2.5",
    })  # fmt: skip
    assert (settings.read_database_url, settings.read_max_lag_s) == (
        "postgresql://u@replica/d",
        2.5,
    )
    unset = load_settings({"JOBGATE_DATABASE_URL": pg, "JOBGATE_READ_DATABASE_URL": ""})
    assert (unset.read_database_url, unset.read_max_lag_s) == (None, 1.0)
    with pytest.raises(errors.ConfigError, match=r"^JOBGATE_READ_DATABASE_URL: .*PostgreSQL"):
        load_settings({"JOBGATE_DATABASE_URL": pg, "JOBGATE_READ_DATABASE_URL": "sqlite:///r"})
    with pytest.raises(errors.ConfigError, match="needs a PostgreSQL database_url"):
        load_settings({"JOBGATE_READ_DATABASE_URL": pg})
    for bad in ("0", "-1", "61", "nan", "soon"):
        with pytest.raises(errors.ConfigError, match=r"^JOBGATE_READ_MAX_LAG_S"):
            load_settings({"JOBGATE_DATABASE_URL": pg, "JOBGATE_READ_MAX_LAG_S": bad})


def test_bad_file_names_the_key(tmp_path: Path) -> None:
    config = tmp_path / "jobgate.toml"
    config.write_text('[providers.up]\nkind = "carrier-pigeon"\n')
    with pytest.raises(errors.ConfigError) as caught:
        load_settings({}, config_path=config)
    assert "providers" in str(caught.value) and "kind" in str(caught.value)
    config.write_text("this is = = not toml")
    with pytest.raises(errors.ConfigError, match="cannot read"):
        load_settings({}, config_path=config)
    with pytest.raises(errors.ConfigError, match="not found"):
        load_settings({"JOBGATE_CONFIG": str(tmp_path / "missing.toml")})


def test_responses_api_per_provider_kind(tmp_path: Path) -> None:
    config = tmp_path / "jobgate.toml"
    config.write_text(
        '[providers.local]\nkind = "openai"\nresponses_api = "chat_completions"\n'
        '[providers.claude]\nkind = "anthropic"\n'
    )
    settings = load_settings({}, config_path=config)
    assert settings.providers["local"].responses_api == "chat_completions"
    assert settings.providers["claude"].responses_api == "native"
    config.write_text(
        '[providers.claude]\nkind = "anthropic"\nresponses_api = "chat_completions"\n'
    )
    with pytest.raises(errors.ConfigError) as caught:
        load_settings({}, config_path=config)
    assert "responses_api" in str(caught.value) and "claude" in str(caught.value)


@pytest.mark.parametrize("kind", ["anthropic", "sim"])
def test_assistant_prefill_is_an_openai_compatible_servers_flag(tmp_path: Path, kind: str) -> None:
    config = tmp_path / "jobgate.toml"
    config.write_text('[providers.local]\nkind = "openai"\nassistant_prefill = true\n')
    assert load_settings({}, config_path=config).providers["local"].assistant_prefill
    config.write_text('[providers.local]\nkind = "openai"\n')
    assert not load_settings({}, config_path=config).providers["local"].assistant_prefill
    config.write_text(f'[providers.other]\nkind = "{kind}"\nassistant_prefill = true\n')
    with pytest.raises(errors.ConfigError) as caught:
        load_settings({}, config_path=config)
    assert "assistant_prefill" in str(caught.value) and "other" in str(caught.value)
    config.write_text('[providers.local]\nkind = "openai"\nassistant_prefill = 2\n')
    with pytest.raises(errors.ConfigError, match="assistant_prefill"):
        load_settings({}, config_path=config)


def test_native_batches_are_for_kinds_with_a_batch_api(tmp_path: Path) -> None:
    config = tmp_path / "jobgate.toml"
    config.write_text('[providers.up]\nkind = "openai"\n')
    provider = load_settings({}, config_path=config).providers["up"]
    assert not provider.native_batches and provider.batch_discount == 0.5
    assert provider.batch_max_requests is None
    config.write_text('[providers.up]\nkind = "openai"\nnative_batches = true\n')
    assert load_settings({}, config_path=config).providers["up"].native_batches
    config.write_text('[providers.up]\nkind = "anthropic"\nnative_batches = true\n')
    assert load_settings({}, config_path=config).providers["up"].native_batches
    config.write_text('[providers.other]\nkind = "sim"\nnative_batches = true\n')
    with pytest.raises(errors.ConfigError) as caught:
        load_settings({}, config_path=config)
    assert "native_batches" in str(caught.value) and "other" in str(caught.value)


@pytest.mark.parametrize(
    ("line", "accepted"),
    [
        ("batch_discount = 0.25", True),
        ("batch_discount = 1", True),
        ("batch_discount = 0", False),
        ("batch_discount = -0.5", False),
        ("batch_discount = 1.01", False),
        ("batch_discount = nan", False),
        ("batch_discount = inf", False),
        ('batch_discount = "0.5"', False),
        ("batch_max_requests = 1", True),
        ("batch_max_requests = 50000", True),
        ("batch_max_requests = 50001", False),  # OpenAI's Batch API takes 50,000 at most
        ("batch_max_requests = 0", False),
        ("batch_max_requests = 2.5", False),
    ],
)
def test_batch_discount_and_part_size_are_bounded(
    tmp_path: Path, line: str, accepted: bool
) -> None:
    config = tmp_path / "jobgate.toml"
    config.write_text(f'[providers.up]\nkind = "openai"\nnative_batches = true\n{line}\n')
    if accepted:
        load_settings({}, config_path=config)
        return
    with pytest.raises(errors.ConfigError) as caught:
        load_settings({}, config_path=config)
    assert line.split(" ")[0] in str(caught.value)


def test_prices_per_provider_and_model(tmp_path: Path) -> None:
    config = tmp_path / "jobgate.toml"
    config.write_text(
        '[providers.openai]\nkind = "openai"\n'
        "[providers.openai.prices]\n"
        '"gpt-4.1-mini" = { input_per_mtok = 0.40, output_per_mtok = 1.60 }\n'
        '"*" = { input_per_mtok = 2, output_per_mtok = 8.0 }\n'
        "[tenants.acme]\ndaily_cost_budget_usd = 12.5\n"
    )
    settings = load_settings({}, config_path=config)
    assert settings.prices() == {
        "openai": {
            "gpt-4.1-mini": costs.Price(Decimal("0.4"), Decimal("1.6")),
            "*": costs.Price(Decimal("2"), Decimal("8.0")),
        }
    }  # the built-in `sim` has no prices: its usage costs 0
    assert settings.limits_for("acme").daily_cost_budget_usd == 12.5
    assert settings.limits_for("someone").daily_cost_budget_usd == 0


@pytest.mark.parametrize(
    ("toml", "named"),
    [
        ('"m" = { input_per_mtok = -1, output_per_mtok = 1 }', "prices.m.input_per_mtok"),
        ('"m" = { input_per_mtok = "0.4", output_per_mtok = 1 }', "prices.m.input_per_mtok"),
        ('"m" = { input_per_mtok = nan, output_per_mtok = 1 }', "prices.m.input_per_mtok"),
        ('"m" = { input_per_mtok = 1, output_per_mtok = true }', "prices.m.output_per_mtok"),
        ('"m" = { input_per_mtok = 1 }', "prices.m.output_per_mtok"),
        ('"m" = { input_per_mtok = 1, output_per_mtok = 1, cached = 0.1 }', "prices.m.cached"),
        ('"*" = 2.0', "prices.*"),
    ],
)
def test_bad_prices_name_the_setting(tmp_path: Path, toml: str, named: str) -> None:
    config = tmp_path / "jobgate.toml"
    config.write_text(f'[providers.up]\nkind = "openai"\n[providers.up.prices]\n{toml}\n')
    with pytest.raises(errors.ConfigError) as caught:
        load_settings({}, config_path=config)
    message = str(caught.value)
    assert f"providers up.{named}" in message and "\n" not in message


@pytest.mark.parametrize("value", ["-0.01", "inf", '"lots"'])
def test_bad_cost_budget_names_the_setting(tmp_path: Path, value: str) -> None:
    config = tmp_path / "jobgate.toml"
    config.write_text(f"[tenants.acme]\ndaily_cost_budget_usd = {value}\n")
    with pytest.raises(errors.ConfigError) as caught:
        load_settings({}, config_path=config)
    message = str(caught.value)
    assert "tenants acme.daily_cost_budget_usd" in message and "\n" not in message


@pytest.mark.parametrize(
    ("env", "named", "suggested"),
    [
        (
            {"JOBGATE_DATABSE_URL": "postgresql://db/j"},
            "JOBGATE_DATABSE_URL",
            "JOBGATE_DATABASE_URL",
        ),
        ({"JOBGATE_LEASE_TTL": "30"}, "JOBGATE_LEASE_TTL", "JOBGATE_LEASE_TTL_S"),
        ({"JOBGATE_LOG_FROMAT": "json"}, "JOBGATE_LOG_FROMAT", "JOBGATE_LOG_FORMAT"),
    ],
)
def test_a_misspelt_variable_is_an_error_with_a_suggestion(
    env: dict[str, str], named: str, suggested: str
) -> None:
    with pytest.raises(errors.ConfigError) as caught:
        load_settings(env)
    message = str(caught.value)
    assert message.startswith(f"{named}: unknown variable")
    assert f"did you mean {suggested!r}?" in message and "\n" not in message


def test_a_variable_far_from_any_name_has_no_suggestion() -> None:
    with pytest.raises(errors.ConfigError) as caught:
        load_settings({"JOBGATE_ZZZQQQ": "1"})
    assert str(caught.value) == "JOBGATE_ZZZQQQ: unknown variable"


def test_variables_read_outside_the_settings_are_not_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    env = {
        "JOBGATE_URL": "http://127.0.0.1:8000",
        "JOBGATE_API_KEY": "jg_x",
        "JOBGATE_FAILPOINTS": "",
        "JOBGATE_TEST_REQUIRE_POSTGRES": "1",
        "JOBGATE_BENCH_POSTGRES": "x",
        "JOBGATE_SIMULATOR_WEBHOOK_SECRET": "s",
        "JOBGATE_LOG_FORMAT": "json",
        "JOBGATE_ACCESS_LOG": "1",
        "NOT_JOBGATE_DATABSE_URL": "ignored: not our prefix",
    }
    settings = load_settings(env)
    assert settings.log_format == "json" and settings.access_log is True


@pytest.mark.parametrize(
    ("toml", "named", "suggested"),
    [
        ('databse_url = "sqlite:///x.db"\n', "jobgate.toml databse_url", "database_url"),
        ('[providers.up]\nkind = "openai"\napi_key_evn = "K"\n', "providers.up.api_key_evn",
         "api_key_env"),
        ("[tenants.acme]\nmax_runing = 3\n", "tenants.acme.max_runing", "max_running"),
        ("[tenant_defaults]\nweigth = 2\n", "tenant_defaults.weigth", "weight"),
        ('[providers.up]\nkind = "openai"\n[providers.up.prices]\n'
         '"m" = { input_per_mtok = 1, output_per_mtok = 1, input_per_mtoks = 2 }\n',
         "prices.m.input_per_mtoks", "input_per_mtok"),
    ],
)  # fmt: skip
def test_a_misspelt_toml_key_is_an_error_with_a_suggestion(
    tmp_path: Path, toml: str, named: str, suggested: str
) -> None:
    config = tmp_path / "jobgate.toml"
    config.write_text(toml)
    with pytest.raises(errors.ConfigError) as caught:
        load_settings({}, config_path=config)
    message = str(caught.value)
    assert named in message.replace(" ", ".") or named in message
    assert "unknown key" in message and f"did you mean {suggested!r}?" in message
    assert "Extra inputs" not in message


def test_a_variable_a_provider_names_is_not_unknown(tmp_path: Path) -> None:
    config = tmp_path / "jobgate.toml"
    config.write_text(
        '[providers.up]\nkind = "openai"\napi_key_env = "JOBGATE_UPSTREAM_KEY"\n'
        'webhook_secret_env = "JOBGATE_UPSTREAM_HOOKS"\n'
    )
    env = {"JOBGATE_UPSTREAM_KEY": "sk-x", "JOBGATE_UPSTREAM_HOOKS": "whsec_x"}
    settings = load_settings(env, config_path=config)
    assert settings.providers["up"].api_key_env == "JOBGATE_UPSTREAM_KEY"
    with pytest.raises(errors.ConfigError, match="JOBGATE_UPSTREAM_KYE: unknown variable"):
        load_settings({**env, "JOBGATE_UPSTREAM_KYE": "x"}, config_path=config)


def test_edge_limits_have_safe_defaults_and_env_overrides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no jobgate.toml
    settings = load_settings({}, database_url="sqlite:///x.db")
    assert settings.max_request_head_bytes == 64 * 1024
    assert settings.max_request_headers == 100
    assert settings.max_request_line_bytes == 8 * 1024
    assert settings.request_head_timeout_s == 10.0
    assert settings.dashboard_session_ttl_s == 12 * 3600
    tuned = load_settings(
        {"JOBGATE_MAX_REQUEST_HEADERS": "50", "JOBGATE_REQUEST_HEAD_TIMEOUT_S": "2.5"},
        database_url="sqlite:///x.db",
    )
    assert tuned.max_request_headers == 50 and tuned.request_head_timeout_s == 2.5
    with pytest.raises(errors.ConfigError, match="JOBGATE_MAX_REQUEST_HEADERS"):
        load_settings({"JOBGATE_MAX_REQUEST_HEADERS": "2"}, database_url="sqlite:///x.db")


ALB_IDLE_TIMEOUT_S = 60  # AWS ALB's default idle timeout (nginx's upstream keepalive_timeout too)


def test_idle_connections_outlive_a_load_balancers_idle_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The proxy in front must close an idle connection before jobgate does: a request it
    sends on one as jobgate closes it is lost (a 502). uvicorn's default is 5 s."""
    monkeypatch.chdir(tmp_path)
    assert load_settings({}, database_url="sqlite:///x.db").keep_alive_s > ALB_IDLE_TIMEOUT_S
    tuned = load_settings({"JOBGATE_KEEP_ALIVE_S": "350"}, database_url="sqlite:///x.db")
    assert tuned.keep_alive_s == 350
    for bad in ("0", "3601", "1.5", "soon"):
        with pytest.raises(errors.ConfigError, match="JOBGATE_KEEP_ALIVE_S"):
            load_settings({"JOBGATE_KEEP_ALIVE_S": bad}, database_url="sqlite:///x.db")


def test_partitions_ahead_days_is_read_from_the_environment() -> None:
    assert load_settings({}).partitions_ahead_days == 3
    assert load_settings({"JOBGATE_PARTITIONS_AHEAD_DAYS": "7"}).partitions_ahead_days == 7
