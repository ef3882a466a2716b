"""Saved credentials: `jobgate login URL KEY` remembers a key for a server, `jobgate key` prints
the one saved for --url (for scripts: `KEY=$(jobgate key)`). Client-side only: no server code."""

from __future__ import annotations

import json

import click

from jobgate.client import Client, credentials
from jobgate.client import errors as client_errors

TENANT_PREFIX = "jg_"
OPERATOR_PREFIX = "jgo_"


def _kind(key: str) -> str:
    if key.startswith(OPERATOR_PREFIX):
        return "operator_key"
    if key.startswith(TENANT_PREFIX):
        return "api_key"
    raise click.UsageError(f"KEY must be a tenant key ({TENANT_PREFIX}…) or an operator key "
                           f"({OPERATOR_PREFIX}…)")  # fmt: skip


def _check_tenant_key(url: str, key: str) -> str | None:
    """None when the server accepts the key; a note when it cannot say now. A refusal raises."""
    try:
        with Client(url, key, timeout_s=10, max_retries=0) as client:
            client.list(limit=1)
    except client_errors.AuthenticationError:
        raise click.ClickException(f"{url} refused this key; nothing saved") from None
    except client_errors.APIConnectionError:
        return f"{url} did not answer, so the key is not checked"
    return None


@click.command()
@click.argument("url")
@click.argument("key")
@click.option("--no-check", is_flag=True, help="Save without asking the server first.")
def login(url: str, key: str, no_check: bool) -> None:
    """Save KEY for the server at URL (a tenant key jg_… or an operator key jgo_…).

    Client verbs use it for that URL when neither --api-key nor JOBGATE_API_KEY is given.
    Each server URL has its own entry, mode 0600, in
    $XDG_CONFIG_HOME/jobgate/credentials.json (or JOBGATE_CREDENTIALS_PATH).
    """
    url = credentials.normal_url(url)
    if not url.startswith(("http://", "https://")):
        raise click.UsageError(f"URL must start with http:// or https://, not {url!r}")
    field = _kind(key)
    note = None if no_check or field != "api_key" else _check_tenant_key(url, key)
    path = credentials.credentials_path()
    credentials.save(path, url, **{field: key})
    what = "operator key" if field == "operator_key" else "API key"
    click.echo(f"saved the {what} for {url} in {path}")
    if note:
        click.echo(f"note: {note}", err=True)


@click.command()
@click.option(
    "--url",
    envvar="JOBGATE_URL",
    default=credentials.DEFAULT_URL,
    show_default=True,
    help="The jobgate server (JOBGATE_URL).",
)
@click.option("--operator", is_flag=True, help="The operator key instead of the tenant key.")
@click.option("--json", "as_json", is_flag=True, help="Print every saved field as JSON.")
def key(url: str, operator: bool, as_json: bool) -> None:
    """Print the key saved for --url (by `jobgate serve` or `jobgate login`)."""
    entry = credentials.saved_entry(url)
    if as_json:
        click.echo(json.dumps({"url": credentials.normal_url(url), **entry}, indent=2))
        return
    field = "operator_key" if operator else "api_key"
    value = entry.get(field)
    if not value:
        what = "operator key" if operator else "API key"
        raise click.ClickException(
            f"no {what} saved for {credentials.normal_url(url)}: start `jobgate serve` there, "
            "or save one with `jobgate login URL KEY`"
        )
    click.echo(value)


COMMANDS = (login, key)
