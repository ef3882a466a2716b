"""Settings: defaults, then `jobgate.toml` (or $JOBGATE_CONFIG), then JOBGATE_* variables.

A bad value is a ConfigError whose message names the setting, e.g.
`JOBGATE_LEASE_TTL_S: Input should be greater than 0`.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal

import pydantic
import pydantic_core

from jobgate import config_names, database_urls, errors
from jobgate.domain import costs, provider_batches, ranges

DAY_S = 86_400
# The standard webhook schedule spans about three days; results must outlive it.
WEBHOOK_RETRY_WINDOW_S = 3 * DAY_S
# Calls one worker process holds in flight. A call spends its time waiting on the provider
# (one parked coroutine, a few KiB; claims, heartbeats and finishes are batched), so hundreds
# cost little: what protects the system is the provider's `concurrency`, the tenants'
# `max_running` and the provider's own limits. Measured in docs/architecture.md (sizing).
DEFAULT_WORKER_CONCURRENCY = 512
# Calls in flight to one provider per worker process; matches the worker's slots so that one
# provider alone can fill them. Lower it per provider in jobgate.toml.
DEFAULT_PROVIDER_CONCURRENCY = DEFAULT_WORKER_CONCURRENCY
# The largest output cap (`max_tokens`, `max_completion_tokens`, `max_output_tokens`) a request
# may ask of a provider that sets no `max_output_tokens` of its own: the largest output the
# current models offer. A cap is also what a token estimate charges a shared tpm before the
# call, so an unbounded one would let one job hold a provider's bucket for everyone.
DEFAULT_MAX_OUTPUT_TOKENS = 128_000
# Bounds of the per-key limits: far above any real use, and within what the stores and a
# bucket's spacing (60 / rpm seconds) hold exactly.
MAX_RPM = 10_000_000
MAX_DAILY_TOKENS = 10**15
MAX_DAILY_COST_USD = 1_000_000_000
_OutputTokens = Annotated[int, pydantic.Field(ge=1, le=ranges.MAX_OUTPUT_TOKENS)]
# The provider kinds with a native batch API jobgate can send batches to
# (providers.batch_apis.CLIENTS holds their clients: a test keeps the two in step).
NATIVE_BATCH_KINDS = frozenset({"openai", "anthropic"})
# A browser origin as the Origin header carries it: scheme, host, optional port.
_ORIGIN = re.compile(r"https?://[A-Za-z0-9.-]+(?::[0-9]{1,5})?")


def _number_only(value: Any) -> Any:
    # Decimal would accept "0.40" or true; a price is written as a TOML number.
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        raise pydantic_core.PydanticCustomError("number_type", "Input should be a number")
    return value


_Usd = Annotated[Decimal, pydantic.BeforeValidator(_number_only), pydantic.Field(ge=0)]


class ModelPrice(pydantic.BaseModel):
    """USD per million tokens, e.g. `"gpt-4.1-mini" = { input_per_mtok = 0.40, … }`."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    input_per_mtok: _Usd
    output_per_mtok: _Usd
    # Prompt-cache reads and writes, priced apart as the providers bill them (Anthropic: reads
    # 0.1x and 5-minute writes 1.25x the input price; OpenAI: cached input at its own price).
    # Unset: priced as input.
    cache_read_per_mtok: _Usd | None = None
    cache_write_per_mtok: _Usd | None = None


# What a changed jobgate.toml changes in running processes (services.config_reload).
RELOADABLE_PROVIDER_FIELDS = ("rpm", "tpm", "model_limits", "concurrency", "max_output_tokens")


class ModelLimits(pydantic.BaseModel):
    """`[providers.NAME.model_limits."MODEL"]`: rate limits of one model, shared by every
    worker process (on top of the provider's own), and its bound on output caps (in place of
    the provider's)."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    rpm: int = pydantic.Field(default=0, ge=0, le=10_000_000)  # requests a minute; 0 = none
    tpm: int = pydantic.Field(default=0, ge=0, le=10_000_000_000)  # tokens a minute; 0 = none
    max_output_tokens: _OutputTokens | None = None  # None: the provider's


class ProviderConfig(pydantic.BaseModel):
    """One provider: how to reach it, which models it serves, how long its calls may take."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    kind: Literal["openai", "anthropic", "sim"]
    base_url: str | None = None
    api_key_env: str | None = None  # the variable that holds the key, never the key itself
    models: tuple[str, ...] = ()  # allowed models; empty = any
    model_prefixes: tuple[str, ...] = ()  # `model` values starting with these route here
    mode: Literal["sync", "background"] = "sync"
    # How /v1/responses jobs reach the provider: its own API (`native`: the Responses API of
    # `openai` and `sim`, Messages for `anthropic`), or, for OpenAI-compatible servers that
    # have no Responses API, translated to Chat Completions.
    responses_api: Literal["native", "chat_completions"] = "native"
    # An OpenAI-compatible server that continues a trailing assistant message of a Chat
    # Completions body (vLLM's continue_final_message, llama.cpp, ...): a retry of a job that
    # asked `"on_retry": "continue"` then goes on from its partial output. OpenAI's own API
    # answers after such a message instead, so it stays false there. Anthropic always does.
    assistant_prefill: bool = False
    concurrency: int = pydantic.Field(default=DEFAULT_PROVIDER_CONCURRENCY, gt=0)
    connect_timeout_s: float = pydantic.Field(default=10.0, gt=0)
    request_timeout_s: float = pydantic.Field(default=600.0, gt=0)
    execution_timeout_s: float | None = pydantic.Field(default=None, gt=0)
    webhook_secret_env: str | None = (
        None  # inbound provider webhooks: the signing secret's variable
    )
    # Only for a provider that really deduplicates creates by the Idempotency-Key jobgate
    # sends (the job id): a create whose outcome is unknown is then sent again. OpenAI and
    # Anthropic document no such thing; for them it must stay false, or a re-send may run
    # (and bill) the job twice.
    idempotent_creates: bool = False
    headers: dict[str, str] = pydantic.Field(default_factory=dict)  # extra request headers
    anthropic_version: str = "2023-06-01"
    retry_after_default_s: float = pydantic.Field(default=5.0, ge=0)  # a 429 without the header
    # A 429 holds back this provider's other jobs (in this process) for at most this long; the
    # rate-limited job itself waits as long as the provider asked.
    rate_limit_pause_max_s: float = pydantic.Field(default=30.0, ge=0)
    # Background mode: the first status check after a create, then doubling up to the max.
    reconcile_after_s: float = pydantic.Field(default=10.0, gt=0)
    reconcile_max_interval_s: float = pydantic.Field(default=300.0, gt=0)
    # Circuit breaker: open after this many consecutive failures, probe again after reset_s.
    breaker_failure_threshold: int = pydantic.Field(default=5, gt=0)
    breaker_reset_s: float = pydantic.Field(default=30.0, gt=0)
    # Latency-aware backpressure (providers.health): past either threshold, this process's
    # concurrency for the provider shrinks in proportion (down to 1). None = off.
    backpressure_latency_s: float | None = pydantic.Field(default=None, gt=0)
    backpressure_error_rate: float | None = pydantic.Field(default=None, ge=0, lt=1)
    # Prices by model name; "*" prices every other model of this provider. Usage of a model
    # without a price costs 0 towards cost budgets (and is logged once per model).
    prices: dict[str, ModelPrice] = pydantic.Field(default_factory=dict)
    # Shared rate limits (every worker process together; domain.rate_limits): requests and
    # tokens a minute for the whole provider, and per model. 0 = none.
    rpm: int = pydantic.Field(default=0, ge=0, le=10_000_000)
    tpm: int = pydantic.Field(default=0, ge=0, le=10_000_000_000)
    model_limits: dict[str, ModelLimits] = pydantic.Field(default_factory=dict)
    # The largest output cap a request may ask (a larger one is refused at submit, 400); a
    # model's `max_output_tokens` under model_limits replaces it for that model.
    max_output_tokens: _OutputTokens = DEFAULT_MAX_OUTPUT_TOKENS
    # Provider-native batches: the lines of a `/v1/batches` batch routed here are sent as the
    # provider's own batches (its Batch API), priced at `batch_discount` times its prices, and
    # split into parts of at most `batch_max_requests` lines (None: the provider's own limit).
    native_batches: bool = False
    batch_discount: Annotated[float, pydantic.BeforeValidator(_number_only)] = pydantic.Field(
        default=0.5, gt=0, le=1, allow_inf_nan=False
    )
    batch_max_requests: int | None = pydantic.Field(default=None, ge=1, le=100_000)
    # The upstream reads `sim` directives in a native batch's lines (`jobgate simulator`, or
    # another jobgate): each line keeps its body's `sim` object. A batch line has no header to
    # move them to, and a real provider refuses a member it does not know, so by default a
    # line goes without them.
    sim_directives: bool = False

    def output_bound(self, model: str | None) -> int:
        """The largest output cap a request for `model` may ask of this provider."""
        limits = self.model_limits.get(model) if model is not None else None
        if limits is not None and limits.max_output_tokens is not None:
            return limits.max_output_tokens
        return self.max_output_tokens

    def reloaded(self, wanted: ProviderConfig) -> ProviderConfig:
        """This provider with the fields a reloaded file may change while it runs
        (services.config_reload); the others wait for a restart."""
        return self.model_copy(
            update={field: getattr(wanted, field) for field in RELOADABLE_PROVIDER_FIELDS}
        )

    @pydantic.model_validator(mode="after")
    def _check_responses_api(self) -> ProviderConfig:
        if self.kind == "anthropic" and self.responses_api != "native":
            raise ValueError("responses_api: anthropic providers speak Messages (native) only")
        if self.assistant_prefill and self.kind != "openai":
            raise ValueError(
                "assistant_prefill: only for kind openai (anthropic and sim always continue a "
                "trailing assistant message)"
            )
        if self.native_batches and self.kind not in NATIVE_BATCH_KINDS:
            raise ValueError(
                f"native_batches: only for kinds with a native batch API "
                f"({', '.join(sorted(NATIVE_BATCH_KINDS))}), not {self.kind!r}"
            )
        bound = provider_batches.LIMITS.get(self.kind)
        if self.batch_max_requests is not None and (
            bound is None or self.batch_max_requests > bound.max_requests
        ):
            most = "no batch API" if bound is None else f"at most {bound.max_requests:,}"
            raise ValueError(f"batch_max_requests: kind {self.kind!r} takes {most}")
        return self


class RouteConfig(pydantic.BaseModel):
    """`[routes."ALIAS"]`: a model alias served by the first healthy of its targets
    ("provider:model"); a job's next attempt moves to the next target after a retryable
    failure, a 429 asking to wait longer than `move_after_retry_after_s`, or an open breaker."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    targets: tuple[str, ...] = pydantic.Field(min_length=1, max_length=16)
    move_after_retry_after_s: float = pydantic.Field(default=10.0, ge=0, allow_inf_nan=False)

    @pydantic.field_validator("targets")
    @classmethod
    def _provider_and_model(cls, targets: tuple[str, ...]) -> tuple[str, ...]:
        for target in targets:
            provider, _, model = target.partition(":")
            if not provider or not model:
                raise ValueError(f"target {target!r} is not 'provider:model'")
        return targets

    def pairs(self) -> list[tuple[str, str]]:
        """The targets as (provider, model), in order."""
        return [(t.partition(":")[0], t.partition(":")[2]) for t in self.targets]


class TenantLimits(pydantic.BaseModel):
    """Limits for one tenant; `[tenants.NAME]` in jobgate.toml, defaults for everyone else."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    max_running: int = pydantic.Field(default=0, ge=0)  # 0 = no cap
    max_queued: int = pydantic.Field(default=100_000, ge=0)  # 0 = no cap
    weight: float = pydantic.Field(default=1.0, gt=0)
    allowed_models: tuple[str, ...] = ()  # empty = any
    allowed_providers: tuple[str, ...] = ()  # empty = any
    max_output_tokens: int = pydantic.Field(default=0, ge=0)  # 0 = no cap
    daily_token_budget: int = pydantic.Field(default=0, ge=0)  # 0 = unlimited
    # USD a UTC day, priced with the providers' `prices`; 0 = unlimited
    daily_cost_budget_usd: float = pydantic.Field(default=0.0, ge=0, allow_inf_nan=False)
    # Running jobs per `concurrency_key` (e.g. per end user of the tenant); 0 = no cap
    max_running_per_key: int = pydantic.Field(default=0, ge=0)
    # Per `concurrency_key` too, shared by every worker process (0 = none): job starts a minute
    # (a shared rate limit's bucket, as a provider's `rpm`), and daily budgets as the tenant's.
    # Strict: a quoted number or a boolean is a mistake, not a limit.
    rpm_per_key: int = pydantic.Field(default=0, ge=0, le=MAX_RPM, strict=True)
    daily_token_budget_per_key: int = pydantic.Field(
        default=0, ge=0, le=MAX_DAILY_TOKENS, strict=True
    )
    daily_cost_budget_usd_per_key: float = pydantic.Field(
        default=0.0, ge=0, le=MAX_DAILY_COST_USD, allow_inf_nan=False, strict=True
    )


class Settings(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    database_url: str = database_urls.DEFAULT_URL
    # PostgreSQL only: when database_url is a transaction-mode pooler (PgBouncer), a direct
    # (or session-mode) URL of the same database for the one connection that LISTENs; setting
    # it also keeps every pooled call free of session state (storage.postgres.executor).
    listen_database_url: str | None = None
    # PostgreSQL only: a streaming replica of the same database for status, list, events and
    # long-poll reads (services.replica_reads); a read that must see the caller's own write,
    # a replica behind by more than read_max_lag_s, or one that errs, is answered by the primary.
    read_database_url: str | None = None
    read_max_lag_s: float = pydantic.Field(default=1.0, gt=0, le=60, allow_inf_nan=False)
    # Per process, whatever the calls in flight: claims, heartbeats and finishes are batched.
    database_pool_size: int = pydantic.Field(default=10, gt=0)
    host: str = "127.0.0.1"
    port: int = pydantic.Field(default=8000, ge=0, le=65535)
    roles: tuple[str, ...] = ()  # empty: every role this build has
    lease_ttl_s: float = pydantic.Field(default=60.0, gt=0)
    heartbeat_interval_s: float = pydantic.Field(default=15.0, gt=0)
    reaper_interval_s: float = pydantic.Field(default=30.0, gt=0)
    reaper_warn_threshold: int = pydantic.Field(default=100, gt=0)
    reconciler_interval_s: float = pydantic.Field(default=5.0, gt=0)
    worker_concurrency: int = pydantic.Field(default=DEFAULT_WORKER_CONCURRENCY, gt=0)
    worker_poll_interval_s: float = pydantic.Field(default=1.0, gt=0)
    shutdown_grace_s: float = pydantic.Field(default=10.0, ge=0)
    retry_base_s: float = pydantic.Field(default=2.0, gt=0)
    retry_max_s: float = pydantic.Field(default=300.0, gt=0)
    max_attempts: int = pydantic.Field(default=3, gt=0, le=100)
    max_body_bytes: int = pydantic.Field(default=1024 * 1024, gt=0)
    # How long a client may take to deliver one whole request (head and body).
    request_receipt_timeout_s: float = pydantic.Field(default=60.0, gt=0)
    # The request head (request line and headers): its deadline from the first byte, its size,
    # its number of header fields, and the request target's length (431 / 414 above them).
    request_head_timeout_s: float = pydantic.Field(default=10.0, gt=0)
    # How long a kept-alive connection may stay idle between requests before jobgate closes
    # it. Longer than the idle timeout of a proxy in front (AWS ALB, nginx's upstream
    # keepalive_timeout: 60 s by default): the proxy must close an idle connection first,
    # since a request it sends on one jobgate closes at that moment is lost (the client gets
    # a 502, or a reset). uvicorn's own default, 5 s, is shorter than both.
    keep_alive_s: int = pydantic.Field(default=75, ge=1, le=3600)
    max_request_head_bytes: int = pydantic.Field(default=64 * 1024, ge=1024)
    max_request_headers: int = pydantic.Field(default=100, ge=8)
    max_request_line_bytes: int = pydantic.Field(default=8 * 1024, ge=256)
    # Dashboard sign-ins: how long a session lasts.
    dashboard_session_ttl_s: float = pydantic.Field(default=12 * 3600.0, gt=0, le=30 * DAY_S)
    # The console's job page shows a request's and result's shape only (keys, roles, models,
    # lengths); set to show message content too (prompts and outputs) to operators.
    dashboard_show_content: bool = False
    default_provider: str = "sim"
    webhook_retry_profile: Literal["standard", "short"] = "standard"
    webhook_allow_cidrs: tuple[str, ...] = ()
    webhook_allow_http: bool = False
    webhook_timeout_s: float = pydantic.Field(default=15.0, gt=0, le=60)
    webhook_concurrency: int = pydantic.Field(default=64, gt=0)  # deliveries in flight
    webhook_endpoint_concurrency: int = pydantic.Field(default=8, gt=0)  # per endpoint
    unknown_outcome: Literal["fail", "retry"] = "fail"
    # A streamed answer silent this long has stalled: the attempt ends as a retryable timeout
    # (a job's own `stall_timeout_s` overrides it).
    stall_timeout_s: float = pydantic.Field(default=120.0, gt=0, le=86_400)
    retention_s: float = pydantic.Field(default=7 * DAY_S, gt=0)
    # PostgreSQL: how many UTC days past today the history tables' day partitions are made
    # ahead by the reaper (a day without one still takes its rows, in the DEFAULT partition).
    partitions_ahead_days: int = pydantic.Field(default=3, ge=1, le=60)
    idempotency_ttl_s: float = pydantic.Field(default=DAY_S, ge=DAY_S)
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    # auto: human-readable (coloured) on a terminal, one JSON object per line otherwise
    log_format: Literal["auto", "human", "json"] = "auto"
    access_log: bool = False  # one line per HTTP request (method, path, status, latency)
    # Browser origins (`https://app.example.com`, or `*`) that may call the routes a job token
    # reaches (http.middleware.cors); none by default: no other origin may.
    cors_origins: tuple[str, ...] = ()
    credentials_path: str | None = None  # where `serve` saves the default tenant's key
    providers: dict[str, ProviderConfig] = pydantic.Field(default_factory=dict)
    tenants: dict[str, TenantLimits] = pydantic.Field(default_factory=dict)
    routes: dict[str, RouteConfig] = pydantic.Field(default_factory=dict)  # model aliases
    tenant_defaults: TenantLimits = TenantLimits()
    max_queued_total: int = pydantic.Field(default=1_000_000, gt=0)
    max_output_tokens_mode: Literal["clamp", "reject"] = "clamp"
    metrics_public: bool = False  # /metrics without an operator key (a private network only)
    metrics_port: int = pydantic.Field(default=0, ge=0, le=65535)  # roles without the API
    # Batches: an uploaded file's size and line bounds, and the batch jobs' priority
    # (0 runs first; interactive submits default to 5).
    files_max_bytes: int = pydantic.Field(default=200 * 1024 * 1024, gt=0)
    # What one tenant may keep uploaded (its result files not counted): files and their bytes;
    # and how long a file (uploaded or a result) is kept before retention deletes it (OpenAI:
    # 30 days).
    files_max_per_tenant: int = pydantic.Field(default=10_000, gt=0)
    files_max_bytes_per_tenant: int = pydantic.Field(default=20 * 1024**3, gt=0)
    files_expire_after_s: float = pydantic.Field(default=30 * DAY_S, ge=3600, allow_inf_nan=False)
    batch_max_lines: int = pydantic.Field(default=50_000, gt=0)
    batch_priority: int = pydantic.Field(default=8, ge=0, le=9)
    # How often the batches role asks a provider how each of a batch's provider-native batches
    # stands (its Batch API), per part.
    batch_poll_interval_s: float = pydantic.Field(default=10.0, gt=0, le=3600, allow_inf_nan=False)
    # Live stream readers (job output, job events, Responses streams) one tenant may hold open
    # on one API process; one more is answered 429. Readers of one job share one feed.
    stream_readers_per_tenant: int = pydantic.Field(default=500, gt=0)
    # Recurring schedules one tenant may keep (POST /v1/schedules beyond it: 403).
    schedules_max_per_tenant: int = pydantic.Field(default=1000, gt=0)
    # What carries "job ready" to workers (docs/transports.md): `database` (claims straight from
    # the job table), or a broker URL: redis://host:port/db, amqp://user:pass@host:port/vhost,
    # sqs://QUEUE?endpoint_url=…&region=…. The job row stays the truth either way.
    transport: str = "database"
    # A ready job still unclaimed this long after its message was published is published again
    # (the broker lost it); a message whose tenant was at its cap is retried this much later.
    transport_sweep_after_s: float = pydantic.Field(default=60.0, gt=0)
    transport_defer_s: float = pydantic.Field(default=1.0, gt=0)
    # At most this many "job ready" messages wait in the broker unclaimed; which jobs fill the
    # window is the weighted fair share across tenants (about 2x the fleet's slots is tight).
    transport_window: int = pydantic.Field(default=1000, gt=0)
    # While the broker is unreachable: `database` claims from the job table meanwhile;
    # `fail` claims nothing and reports the outage (/readyz 503, jobgate_transport_up 0).
    transport_fallback: Literal["database", "fail"] = "database"

    @pydantic.field_validator("providers")
    @classmethod
    def _provider_names(cls, providers: dict[str, ProviderConfig]) -> dict[str, ProviderConfig]:
        # A route target is "provider:model", and a shared bucket of a concurrency key is named
        # "key:TENANT" (domain.rate_limits.key_bucket): a provider name never holds a colon.
        for name in providers:
            if not name or ":" in name:
                raise ValueError(f"provider name {name!r} must be non-empty and hold no ':'")
        return providers

    @pydantic.field_validator("database_url")
    @classmethod
    def _database_url(cls, url: str) -> str:
        problem = database_urls.problem(url)
        if problem is not None:
            raise ValueError(problem)
        return url

    @pydantic.field_validator("cors_origins")
    @classmethod
    def _cors_origins(cls, origins: tuple[str, ...]) -> tuple[str, ...]:
        for origin in origins:
            if origin != "*" and not _ORIGIN.fullmatch(origin):
                raise ValueError(
                    f"{origin!r} is not an origin: scheme://host[:port], without a path or a "
                    "trailing slash (or * for any origin)"
                )
        return tuple(origin.lower() for origin in origins)

    @pydantic.field_validator("listen_database_url", "read_database_url")
    @classmethod
    def _postgres_url(cls, url: str | None) -> str | None:
        if not url:
            return None  # an empty variable: not set
        if not url.startswith(database_urls.POSTGRES_SCHEMES):
            raise ValueError("must be a PostgreSQL URL (postgresql://…)")
        return url

    @pydantic.model_validator(mode="after")
    def _check_relations(self) -> Settings:
        if self.heartbeat_interval_s >= self.lease_ttl_s:
            raise ValueError(
                "heartbeat_interval_s must be shorter than lease_ttl_s "
                f"({self.heartbeat_interval_s} >= {self.lease_ttl_s})"
            )
        if self.retention_s < WEBHOOK_RETRY_WINDOW_S and self.webhook_retry_profile == "standard":
            raise ValueError(
                f"retention_s ({self.retention_s:g} s) must cover the webhook retry window "
                f"({WEBHOOK_RETRY_WINDOW_S} s, about 3 days): raise JOBGATE_RETENTION_S, or set "
                "JOBGATE_WEBHOOK_RETRY_PROFILE=short (retries within seconds, for development)"
            )
        postgres = self.database_url.startswith(database_urls.POSTGRES_SCHEMES)
        if self.listen_database_url and not postgres:
            raise ValueError("listen_database_url needs a PostgreSQL database_url")
        if self.read_database_url and not postgres:
            raise ValueError("read_database_url needs a PostgreSQL database_url")
        if self.transport != "database" and "://" not in self.transport:
            raise ValueError(
                "transport must be `database` or a broker URL (redis://, amqp://, sqs://)"
            )
        if self.default_provider not in self.all_providers():
            raise ValueError(f"default_provider {self.default_provider!r} is not configured")
        return self

    def all_providers(self) -> dict[str, ProviderConfig]:
        """Configured providers plus the built-in simulator `sim` (unless overridden)."""
        builtin = {"sim": ProviderConfig(kind="sim", model_prefixes=("sim-",))}
        return {**builtin, **self.providers}

    def batch_discounts(self) -> dict[str, Decimal]:
        """Every provider's `batch_discount`: what its native batches' usage costs against its
        prices."""
        return {
            name: costs.usd(provider.batch_discount)
            for name, provider in self.all_providers().items()
        }

    def prices(self) -> costs.Prices:
        """Every provider's prices, by provider name then model (or "*")."""
        return {
            name: {
                model: costs.Price(
                    price.input_per_mtok,
                    price.output_per_mtok,
                    cache_read_per_mtok=price.cache_read_per_mtok,
                    cache_write_per_mtok=price.cache_write_per_mtok,
                )
                for model, price in provider.prices.items()
            }
            for name, provider in self.all_providers().items()
            if provider.prices
        }

    def limits_for(self, tenant_name: str) -> TenantLimits:
        return self.tenants.get(tenant_name, self.tenant_defaults)


# Settings that JOBGATE_* variables may set; the rest come from jobgate.toml only.
_ENV_FIELDS = (
    "database_url", "listen_database_url", "read_database_url", "read_max_lag_s",
    "database_pool_size", "host", "port", "roles",
    "lease_ttl_s",
    "heartbeat_interval_s", "reaper_interval_s", "reaper_warn_threshold", "reconciler_interval_s",
    "worker_concurrency",
    "worker_poll_interval_s", "shutdown_grace_s", "retry_base_s", "retry_max_s", "max_attempts",
    "max_body_bytes", "default_provider", "webhook_retry_profile", "webhook_allow_cidrs",
    "webhook_allow_http", "webhook_timeout_s", "webhook_concurrency",
    "webhook_endpoint_concurrency", "unknown_outcome", "stall_timeout_s", "retention_s",
    "partitions_ahead_days",
    "idempotency_ttl_s",
    "log_level", "credentials_path", "max_queued_total", "max_output_tokens_mode",
    "request_receipt_timeout_s", "metrics_public", "metrics_port", "log_format", "access_log",
    "request_head_timeout_s", "keep_alive_s", "max_request_head_bytes", "max_request_headers",
    "max_request_line_bytes", "dashboard_session_ttl_s", "dashboard_show_content",
    "files_max_bytes", "files_max_per_tenant", "files_max_bytes_per_tenant",
    "files_expire_after_s", "batch_max_lines", "batch_priority", "batch_poll_interval_s",
    "stream_readers_per_tenant",
    "schedules_max_per_tenant",
    "transport", "transport_sweep_after_s", "transport_defer_s", "transport_fallback",
    "transport_window", "cors_origins",
)  # fmt: skip
_LIST_FIELDS = {"roles", "webhook_allow_cidrs", "cors_origins"}


def _env_value(field: str, raw: str) -> Any:
    if field in _LIST_FIELDS:
        return tuple(part.strip() for part in raw.split(",") if part.strip())
    if field in ("webhook_allow_http", "metrics_public", "access_log", "dashboard_show_content"):
        lowered = raw.strip().lower()
        if lowered in {"1", "true", "yes", "on"}:
            return True
        if lowered in {"0", "false", "no", "off", ""}:
            return False
    return raw


def config_file(env: Mapping[str, str] | None = None) -> Path:
    """Where the configuration file is read from: $JOBGATE_CONFIG, else ./jobgate.toml."""
    env = os.environ if env is None else env
    return Path(env.get("JOBGATE_CONFIG") or "jobgate.toml")


def load_settings(
    env: Mapping[str, str] | None = None,
    *,
    config_path: str | os.PathLike[str] | None = None,
    **overrides: Any,
) -> Settings:
    """Read jobgate.toml (if present) and JOBGATE_* variables; `overrides` win over both."""
    env = os.environ if env is None else env
    path = Path(config_path) if config_path else config_file(env)
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    if path.exists():
        try:
            file_values = tomllib.loads(path.read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise errors.ConfigError(str(path), f"cannot read: {exc}") from exc
        values.update(file_values)
        sources.update({key: f"{path.name} {key}" for key in file_values})
    elif config_path or env.get("JOBGATE_CONFIG"):
        raise errors.ConfigError(str(path), "configuration file not found")
    variables = [f"JOBGATE_{field.upper()}" for field in _ENV_FIELDS]
    # A provider's key or secret may live in a JOBGATE_* variable the file names.
    named = config_names.variables_named_by(values.get("providers"))
    unknown = config_names.unknown_variable(env, [*variables, *named])
    if unknown is not None:
        suggestion = config_names.did_you_mean(unknown, variables, prefix="JOBGATE_")
        raise errors.ConfigError(unknown, f"unknown variable{suggestion}")
    for field in _ENV_FIELDS:
        name = f"JOBGATE_{field.upper()}"
        if name in env:
            values[field] = _env_value(field, env[name])
            sources[field] = name
    values.update(overrides)
    sources.update({key: f"--{key.replace('_', '-')}" for key in overrides})
    try:
        return Settings.model_validate(values)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        location = [str(part) for part in first["loc"]]
        message = first["msg"]
        if first["type"] == "value_error":  # our own validators' words, without pydantic's prefix
            message = str(first.get("ctx", {}).get("error", message))
        if first["type"] == "extra_forbidden":
            known = config_names.fields_at(Settings, location[:-1])
            message = f"unknown key{config_names.did_you_mean(location[-1], known)}"
        head = location[0] if location else "configuration"
        setting = sources.get(head, head)
        if len(location) > 1:
            setting = (
                f"{setting} {'.'.join(location[1:])}" if head in sources else ".".join(location)
            )
        raise errors.ConfigError(setting, message) from None
