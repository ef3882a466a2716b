"""`jobgate jobs cancel|redrive|delete --where KEY=VALUE …`: bulk actions by filter over the
API (POST /v1/jobs/bulk_*). Counts first (a dry run), asks before acting (unless --yes), then
acts in calls of --chunk jobs each, resuming from the server's cursor, with progress on stderr.

With a tenant key the action reaches that tenant's jobs; with an operator key (jgo_…) any
tenant's (`--where tenant=NAME` narrows it).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from jobgate.cli import client_connection as connection
from jobgate.cli import moments
from jobgate.client import Client

WHERE_KEYS = (
    "tenant", "status", "provider", "model", "error_code", "created_after", "created_before",
    "dead_lettered", "metadata.KEY",
)  # fmt: skip
_DONE = {"cancel": "cancelled", "redrive": "redriven", "delete": "deleted"}


def _usage(message: str, as_json: bool) -> connection.VerbError:
    return connection.VerbError(
        message, exit_code=connection.EXIT_USAGE, as_json=as_json, detail={"code": "usage"}
    )


def _moment(key: str, value: str, as_json: bool) -> int:
    try:
        return moments.unix_seconds(key, value)
    except ValueError as exc:
        raise _usage(str(exc), as_json) from None


def parse_where(items: tuple[str, ...], as_json: bool) -> dict[str, Any]:
    """The API's `where` object from KEY=VALUE pairs (status may repeat or list a,b)."""
    where: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise _usage(f"--where wants KEY=VALUE, not {item!r}", as_json)
        if key.startswith("metadata."):
            where.setdefault("metadata", {})[key.removeprefix("metadata.")] = value
        elif key == "status":
            where.setdefault("status", []).extend(v for v in value.split(",") if v)
        elif key in ("created_after", "created_before"):
            where[key] = _moment(key, value, as_json)
        elif key == "dead_lettered":
            if value.lower() not in ("true", "false"):
                raise _usage("dead_lettered is true or false", as_json)
            where[key] = value.lower() == "true"
        elif key in WHERE_KEYS:
            where[key] = value
        else:
            raise _usage(f"unknown --where key {key!r} (one of {', '.join(WHERE_KEYS)})", as_json)
    return where


def _post(client: Client, action: str, body: dict[str, Any]) -> dict[str, Any]:
    # The SDK has no bulk method (yet): its request helper gives the same retries on transport
    # errors and the same problem+json errors as every other verb. Not retried blindly: a
    # repeated chunk is harmless, but the answer's cursor is what resumes the action.
    response = client._request(
        "POST",
        f"/v1/jobs/bulk_{action}",
        content=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        idempotent=False,
    )
    answer: dict[str, Any] = client._json(response)
    return answer


def _command(action: str) -> click.Command:
    @click.command(action)
    @click.option(
        "--where",
        "where_items",
        multiple=True,
        metavar="KEY=VALUE",
        help=f"A criterion, repeatable (AND): {', '.join(WHERE_KEYS)}.",
    )
    @click.option("--all", "everything", is_flag=True, help="No criteria: every job it applies to.")
    @click.option("--reason", help="A note for the audit trail (on each changed job's event).")
    @click.option("--dry-run", is_flag=True, help="Only count the jobs it would change.")
    @click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
    @click.option(
        "--chunk",
        type=click.IntRange(1, 100_000),
        default=10_000,
        show_default=True,
        help="Jobs per API call (each call is transactions of a few hundred).",
    )
    @connection.connection_options
    def command(
        where_items: tuple[str, ...],
        everything: bool,
        reason: str | None,
        dry_run: bool,
        yes: bool,
        chunk: int,
        url: str,
        api_key: str | None,
        as_json: bool,
    ) -> None:
        if not where_items and not everything:
            raise _usage(f"say which jobs to {action}: --where KEY=VALUE … (or --all)", as_json)
        where = parse_where(where_items, as_json)
        with connection.connect(url, api_key, as_json) as client:
            counted = _post(client, action, {"where": where, "dry_run": True})
            matched = int(counted["matched"])
            if dry_run or matched == 0:
                _report(action, matched, 0, dry_run=True, as_json=as_json)
                return
            if not yes:
                if not sys.stdin.isatty():
                    raise _usage(f"{action} {matched} jobs? pass --yes to confirm", as_json)
                if not click.confirm(f"{action} {matched} jobs?", err=True):
                    raise connection.VerbError("not confirmed: nothing changed", as_json=as_json)
            changed, cursor, more = 0, None, True
            while more:
                body = {"where": where, "reason": reason, "after": cursor, "limit": chunk}
                answer = _post(client, action, body)
                changed += int(answer["changed"])
                cursor, more = answer["last_id"] or cursor, bool(answer["has_more"])
                if not as_json:
                    click.echo(f"{_DONE[action]} {changed}…", err=True)
        _report(action, matched, changed, dry_run=False, as_json=as_json)

    command.help = (
        f"{action.capitalize()} every job matching --where (see POST /v1/jobs/bulk_{action}): "
        "counts, asks, then acts in chunks."
    )
    return command


def _report(action: str, matched: int, changed: int, *, dry_run: bool, as_json: bool) -> None:
    if as_json:
        out = {"action": action, "dry_run": dry_run, "matched": matched, "changed": changed}
        click.echo(json.dumps(out))
    elif dry_run:
        click.echo(f"{matched} jobs would be {_DONE[action]}")
    else:
        click.echo(f"{_DONE[action]} {changed} jobs ({matched} matched when counted)")


COMMANDS = {action: _command(action) for action in ("cancel", "redrive", "delete")}
