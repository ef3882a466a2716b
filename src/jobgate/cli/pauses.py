"""`jobgate pause`, `jobgate resume ID` (or `--all`) and `jobgate pauses`: the operator's pauses
of claims over the API (POST, DELETE and GET /v1/pauses). They need an operator key: --api-key
jgo_… (or JOBGATE_API_KEY), else the one `jobgate serve` saved for --url."""

from __future__ import annotations

import json
from typing import Any

import click
import httpx

from jobgate.cli import client_output as out
from jobgate.cli.client_connection import EXIT_USAGE, VerbError, connection_options
from jobgate.client import credentials


def _operator_key(url: str, api_key: str | None, as_json: bool) -> str:
    if api_key:
        return api_key
    saved = credentials.saved_entry(url).get("operator_key")
    if saved:
        return saved
    raise VerbError(
        f"pauses need an operator key for {credentials.normal_url(url)}: pass --api-key jgo_… "
        "(or JOBGATE_API_KEY), or start `jobgate serve` there, which saves one",
        exit_code=EXIT_USAGE,
        as_json=as_json,
        detail={"code": "no_operator_key"},
    )


def _call(url: str, key: str, as_json: bool, method: str, path: str, **kwargs: Any) -> Any:
    try:
        with httpx.Client(
            base_url=url.rstrip("/"),
            headers={"Authorization": f"Bearer {key}"},
            timeout=httpx.Timeout(30.0, connect=10.0),
        ) as http:
            response = http.request(method, path, **kwargs)
    except httpx.TransportError as exc:
        raise VerbError(f"cannot reach {url}: {exc}", as_json=as_json) from None
    if response.is_success:
        return response.json()
    try:
        error = response.json().get("error") or {}
    except ValueError:
        error = {}
    message = error.get("message") or response.text[:200] or response.reason_phrase
    raise VerbError(
        message,
        exit_code=EXIT_USAGE if response.status_code in (400, 401, 403) else 1,
        as_json=as_json,
        detail={"status": response.status_code, "code": error.get("code")},
    )


def scope_text(pause: dict[str, Any]) -> str:
    """What a pause covers, in words: `provider sim, model any, tenant acme`."""
    if not (pause.get("provider") or pause.get("model") or pause.get("tenant")):
        return "every claim"
    return ", ".join(
        f"{name} {pause.get(name) or 'any'}" for name in ("provider", "model", "tenant")
    )


def _line(pause: dict[str, Any]) -> str:
    reason = f": {pause['reason']}" if pause.get("reason") else ""
    return f"{pause['id']}  {scope_text(pause)}{reason}"


@click.command()
@click.option("--provider", help="Only jobs for this provider (default: any).")
@click.option("--model", help="Only jobs for this model (default: any).")
@click.option("--tenant", help="Only this tenant's jobs, by name (default: any).")
@click.option("--reason", help="Why: shown on every job it holds.")
@connection_options
def pause(
    provider: str | None,
    model: str | None,
    tenant: str | None,
    reason: str | None,
    url: str,
    api_key: str | None,
    as_json: bool,
) -> None:
    """Pause claims: queued jobs the pause covers stay queued (running ones finish) until
    `jobgate resume ID`. With no --provider, --model or --tenant, every claim is paused."""
    body = {"provider": provider, "model": model, "tenant": tenant, "reason": reason}
    key = _operator_key(url, api_key, as_json)
    created = _call(url, key, as_json, "POST", "/v1/pauses", json=body)
    if as_json:
        out.print_json(created)
    else:
        click.echo(f"paused {_line(created)}")


@click.command()
@click.argument("pause_id", required=False)
@click.option("--all", "everything", is_flag=True, help="Resume every pause.")
@connection_options
def resume(
    pause_id: str | None, everything: bool, url: str, api_key: str | None, as_json: bool
) -> None:
    """Resume what pause ID held (its jobs are claimed again), or every pause with --all."""
    if (pause_id is None) == (not everything):
        raise VerbError(
            "say which pause: jobgate resume ID, or --all",
            exit_code=EXIT_USAGE,
            as_json=as_json,
            detail={"code": "usage"},
        )
    key = _operator_key(url, api_key, as_json)
    ids = [pause_id] if pause_id is not None else [
        p["id"] for p in _call(url, key, as_json, "GET", "/v1/pauses")["data"]
    ]  # fmt: skip
    resumed = [_call(url, key, as_json, "DELETE", f"/v1/pauses/{i}") for i in ids]
    if as_json:
        out.print_json({"object": "list", "data": resumed})
    elif not resumed:
        click.echo("nothing was paused")
    for done in [] if as_json else resumed:
        click.echo(f"resumed {_line(done)}")


@click.command()
@connection_options
def pauses(url: str, api_key: str | None, as_json: bool) -> None:
    """List the pauses in force."""
    key = _operator_key(url, api_key, as_json)
    found = _call(url, key, as_json, "GET", "/v1/pauses")
    if as_json:
        click.echo(json.dumps(found, ensure_ascii=False))
        return
    if not found["data"]:
        click.echo("nothing is paused")
    for item in found["data"]:
        since = out.timestamp(item["created_at"])
        click.echo(f"{_line(item)}  (by {item['created_by']} since {since})")


COMMANDS = (pause, resume, pauses)
