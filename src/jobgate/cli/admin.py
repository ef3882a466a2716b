"""Operator commands: tenants and their API keys."""

from __future__ import annotations

import dataclasses
import math
from decimal import Decimal
from typing import Any

import click

from jobgate import config
from jobgate.cli import help_format
from jobgate.cli.common import emit, load_for_operator, with_runtime
from jobgate.process.runtime import Runtime
from jobgate.storage.records import LimitOverrides

_json = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
_db = click.option(
    "--database-url", help="sqlite:///path or postgresql://… (JOBGATE_DATABASE_URL)."
)


@click.group(cls=help_format.WholeHelpGroup)
def tenants() -> None:
    """Create and list tenants."""


@tenants.command("create")
@click.argument("name")
@_json
@_db
def tenants_create(name: str, as_json: bool, database_url: str | None) -> None:
    """Create tenant NAME and print its API key (shown once)."""

    async def work(runtime: Runtime) -> dict[str, str]:
        issued = await runtime.tenants.create(name)
        return {
            "tenant": issued.tenant.name,
            "tenant_id": issued.tenant.id,
            "api_key": issued.api_key,
        }

    result = with_runtime(load_for_operator(database_url), work)
    emit(
        result,
        as_json=as_json,
        text=f"created tenant {result['tenant']}; API key (shown once):\n{result['api_key']}",
    )


@tenants.command("list")
@_json
@_db
def tenants_list(as_json: bool, database_url: str | None) -> None:
    """List tenants."""

    async def work(runtime: Runtime) -> list[dict[str, str]]:
        return [
            {"tenant": t.name, "tenant_id": t.id, "created_at": t.created_at.isoformat()}
            for t in await runtime.storage.tenant_list()
        ]

    rows = with_runtime(load_for_operator(database_url), work)
    emit(
        rows,
        as_json=as_json,
        text="\n".join(f"{r['tenant']:<24} {r['tenant_id']}" for r in rows) or "no tenants",
    )


def _finite(_ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    """A USD amount is a number: nan passes FloatRange's bounds, so it is refused here."""
    if value is not None and not math.isfinite(value):
        raise click.BadParameter("must be a finite number", param=param)
    return value


def _names(value: str | None) -> tuple[str, ...] | None:
    return None if value is None else tuple(v.strip() for v in value.split(",") if v.strip())


@tenants.command("set")
@click.argument("name")
@click.option("--max-running", type=click.IntRange(min=0), help="Worker slots at once (0: no cap).")
@click.option("--max-queued", type=click.IntRange(min=0), help="Queued jobs before 429 (0: none).")
@click.option("--weight", type=click.FloatRange(min=0, min_open=True), help="Fair-share weight.")
@click.option("--allowed-models", help="Comma-separated; empty string: any.")
@click.option("--allowed-providers", help="Comma-separated; empty string: any.")
@click.option("--max-output-tokens", type=click.IntRange(min=0), help="Per request (0: none).")
@click.option("--daily-token-budget", type=click.IntRange(min=0), help="Tokens a day (0: none).")
@click.option(
    "--daily-cost-budget-usd",
    type=click.FloatRange(min=0),
    callback=_finite,
    help="USD a UTC day, priced with the providers' prices (0: none).",
)
@click.option(
    "--max-running-per-key",
    type=click.IntRange(min=0),
    help="Running jobs per concurrency_key, e.g. per end user (0: no cap).",
)
@click.option(
    "--rpm-per-key",
    type=click.IntRange(min=0, max=config.MAX_RPM),
    help="Job starts a minute per concurrency_key, in every worker process (0: none).",
)
@click.option(
    "--daily-token-budget-per-key",
    type=click.IntRange(min=0, max=config.MAX_DAILY_TOKENS),
    help="Tokens a UTC day per concurrency_key (0: none).",
)
@click.option(
    "--daily-cost-budget-usd-per-key",
    type=click.FloatRange(min=0, max=config.MAX_DAILY_COST_USD),
    callback=_finite,
    help="USD a UTC day per concurrency_key, priced with the providers' prices (0: none).",
)
@click.option("--reset", is_flag=True, help="Drop every override first (back to jobgate.toml).")
@_json
@_db
def tenants_set(
    name: str, reset: bool, as_json: bool, database_url: str | None, **changes: object
) -> None:
    """Override a tenant's limits (they win over jobgate.toml, in every process within 2 s)."""
    changes["allowed_models"] = _names(changes["allowed_models"])  # type: ignore[arg-type]
    changes["allowed_providers"] = _names(changes["allowed_providers"])  # type: ignore[arg-type]

    async def work(runtime: Runtime) -> dict[str, object]:
        tenant = await runtime.storage.tenant_get(name=name)
        if tenant is None:
            raise click.ClickException(f"no tenant named {name!r}")
        current = (
            LimitOverrides()
            if reset
            else ((await runtime.storage.tenant_limits_all()).get(tenant.id, LimitOverrides()))
        )
        given: dict[str, Any] = {k: v for k, v in changes.items() if v is not None}
        wanted = dataclasses.replace(current, **given)
        await runtime.storage.tenant_limits_set(tenant_id=tenant.id, overrides=wanted)
        runtime.limits.invalidate()
        return {"tenant": name, **(await runtime.limits.for_tenant(tenant.id)).model_dump()}

    result = with_runtime(load_for_operator(database_url), work)
    emit(result, as_json=as_json, text=_limits_text(result))


@tenants.command("show")
@click.argument("name")
@_json
@_db
def tenants_show(name: str, as_json: bool, database_url: str | None) -> None:
    """Show the limits in force for a tenant, and what it has spent since UTC midnight."""

    async def work(runtime: Runtime) -> dict[str, object]:
        tenant = await runtime.storage.tenant_get(name=name)
        if tenant is None:
            raise click.ClickException(f"no tenant named {name!r}")
        limits = (await runtime.limits.for_tenant(tenant.id)).model_dump()
        spent = (await runtime.limits.spend_today()).get(tenant.id, Decimal(0))
        # A JSON number, exact to the micro-dollar (a sum of Decimals, rounded once here).
        return {"tenant": name, **limits, "spend_today_usd": float(round(spent, 6))}

    result = with_runtime(load_for_operator(database_url), work)
    emit(result, as_json=as_json, text=_limits_text(result))


# Limits whose 0 (or empty list) means "no limit".
_UNLIMITED_WHEN_ZERO = frozenset({
    "max_running", "max_queued", "max_output_tokens", "daily_token_budget",
    "daily_cost_budget_usd", "max_running_per_key", "rpm_per_key",
    "daily_token_budget_per_key", "daily_cost_budget_usd_per_key",
})  # fmt: skip


def _value_text(key: str, value: object) -> str:
    """One value as a person reads it: lists joined, 0 limits spelled out, never a repr."""
    if isinstance(value, list | tuple | set | frozenset):
        return ", ".join(str(item) for item in value) if value else "any"
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if key in _UNLIMITED_WHEN_ZERO and value == 0:
        return "0 (unlimited)"
    if isinstance(value, dict):
        return ", ".join(f"{k}={_value_text(str(k), v)}" for k, v in value.items()) or "-"
    return str(value)


def _limits_text(limits: dict[str, object]) -> str:
    return "\n".join(f"{key:<22} {_value_text(key, value)}" for key, value in limits.items())


@click.group(cls=help_format.WholeHelpGroup)
def operators() -> None:
    """Operator keys (the dashboard sees every tenant)."""


@operators.command("create")
@click.argument("name")
@_json
@_db
def operators_create(name: str, as_json: bool, database_url: str | None) -> None:
    """Issue an operator key for NAME (shown once)."""

    async def work(runtime: Runtime) -> dict[str, str]:
        return {"operator": name, "operator_key": await runtime.operators.create(name)}

    result = with_runtime(load_for_operator(database_url), work)
    emit(
        result,
        as_json=as_json,
        text=f"operator key for {name} (shown once):\n{result['operator_key']}",
    )


@click.group(cls=help_format.WholeHelpGroup)
def keys() -> None:
    """Issue, list and revoke API keys."""


@keys.command("create")
@click.option("--tenant", "tenant_name", required=True, help="Tenant name.")
@_json
@_db
def keys_create(tenant_name: str, as_json: bool, database_url: str | None) -> None:
    """Issue another key for a tenant (shown once)."""

    async def work(runtime: Runtime) -> dict[str, str]:
        tenant = await runtime.storage.tenant_get(name=tenant_name)
        if tenant is None:
            raise click.ClickException(f"no tenant named {tenant_name!r}")
        issued = await runtime.tenants.issue_key(tenant)
        return {"tenant": tenant.name, "key_id": issued.key_id, "api_key": issued.api_key}

    result = with_runtime(load_for_operator(database_url), work)
    emit(result, as_json=as_json, text=f"{result['key_id']}: {result['api_key']}")


@keys.command("list")
@click.option("--tenant", "tenant_name", required=True, help="Tenant name.")
@_json
@_db
def keys_list(tenant_name: str, as_json: bool, database_url: str | None) -> None:
    """List a tenant's keys (prefixes only; keys are stored hashed)."""

    async def work(runtime: Runtime) -> list[dict[str, str | None]]:
        tenant = await runtime.storage.tenant_get(name=tenant_name)
        if tenant is None:
            raise click.ClickException(f"no tenant named {tenant_name!r}")
        return [
            {
                "key_id": k.id,
                "prefix": k.key_prefix,
                "created_at": k.created_at.isoformat(),
                "revoked_at": k.revoked_at.isoformat() if k.revoked_at else None,
            }
            for k in await runtime.storage.api_key_list(tenant_id=tenant.id)
        ]

    rows = with_runtime(load_for_operator(database_url), work)
    emit(
        rows,
        as_json=as_json,
        text="\n".join(
            f"{r['key_id']}  {r['prefix']}…  {'revoked' if r['revoked_at'] else 'active'}"
            for r in rows
        )
        or "no keys",
    )


@keys.command("revoke")
@click.argument("key_id")
@_db
def keys_revoke(key_id: str, database_url: str | None) -> None:
    """Revoke a key by id."""

    async def work(runtime: Runtime) -> bool:
        return await runtime.storage.api_key_revoke(key_id=key_id)

    if not with_runtime(load_for_operator(database_url), work):
        raise click.ClickException(f"no key with id {key_id!r}")
    click.echo(f"revoked {key_id}")


COMMANDS = (tenants, keys, operators)
