"""The connection every client verb shares: --url / --api-key / --json, the API key they
resolve to, the client's errors as one-line CLI errors (`VerbError`) and an open `Client`.

The key comes from --api-key, then JOBGATE_API_KEY, then the key `jobgate serve` saved for the
URL, then the one saved where jobgate.toml's `credentials_path` points.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import click

from jobgate.client import Client, credentials
from jobgate.client import errors as client_errors

EXIT_FAILURE = 1
EXIT_USAGE = 2
F = TypeVar("F", bound=Callable[..., Any])


class VerbError(click.ClickException):
    """A one-line error (or a JSON object with --json) on stderr, with its exit code."""

    def __init__(
        self,
        message: str,
        *,
        exit_code: int = EXIT_FAILURE,
        as_json: bool = False,
        detail: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.exit_code = exit_code  # type: ignore[misc]  # click types it as a ClassVar
        self.as_json = as_json
        self.detail = detail or {}

    def show(self, file: Any = None) -> None:
        if self.as_json:
            payload = {"error": {"message": self.message, **self.detail}}
            click.echo(json.dumps(payload, ensure_ascii=False), err=True)
        else:
            click.echo(f"jobgate: {self.message}", err=True)


def connection_options(command: F) -> F:
    """--url, --api-key and --json, shared by every client verb."""
    options = [
        click.option(
            "--url",
            envvar="JOBGATE_URL",
            default=credentials.DEFAULT_URL,
            show_default=True,
            help="The jobgate server (JOBGATE_URL).",
        ),
        click.option(
            "--api-key",
            envvar="JOBGATE_API_KEY",
            help="API key (JOBGATE_API_KEY; default: the key `jobgate serve` saved for --url).",
        ),
        click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def api_key_for(url: str, api_key: str | None, as_json: bool) -> str:
    if api_key:
        return api_key
    saved = credentials.saved_key(url) or _key_from_configured_path(url)
    if saved:
        return saved
    raise VerbError(
        f"no API key for {url}: pass --api-key, set JOBGATE_API_KEY, or start `jobgate serve` "
        f"(it saves its key for the CLI; `jobgate login URL KEY` saves one){_misspelt_key()}",
        exit_code=EXIT_USAGE,
        as_json=as_json,
        detail={"code": "no_api_key"},
    )


def _misspelt_key() -> str:
    """`; JOBGATE_APIKEY is set: did you mean JOBGATE_API_KEY?` when a set name is close."""
    names = [name for name in os.environ if name.startswith("JOBGATE_")]
    close = difflib.get_close_matches("JOBGATE_API_KEY", names, n=1, cutoff=0.8)
    return f"; {close[0]} is set: did you mean JOBGATE_API_KEY?" if close else ""


def _key_from_configured_path(url: str) -> str | None:
    """The key saved where jobgate.toml's `credentials_path` points, if it sets one. Imported
    late: the client verbs should not pay for loading the server's settings."""
    if not (os.environ.get("JOBGATE_CONFIG") or os.path.exists("jobgate.toml")):
        return None
    from jobgate import config, errors
    from jobgate.cli.common import load_credentials

    try:
        settings = config.load_settings()
    except errors.ConfigError:
        return None  # a broken server config must not stop a client command
    if not settings.credentials_path:
        return None
    saved = load_credentials(url, settings)
    return saved.get("api_key") if saved else None


@contextlib.contextmanager
def reported(as_json: bool) -> Iterator[None]:
    """Turn the client's errors into one-line CLI errors with their exit codes."""
    try:
        yield
    except client_errors.WaitTimeout:
        raise  # the waiting verbs report it with their own exit code
    except client_errors.AuthenticationError as exc:
        raise VerbError(
            f"the server refused the API key ({exc.status} {exc.code}); "
            "check --api-key / JOBGATE_API_KEY",
            exit_code=EXIT_USAGE,
            as_json=as_json,
            detail={"status": exc.status, "code": exc.code},
        ) from None
    except client_errors.APIStatusError as exc:
        raise VerbError(
            str(exc), as_json=as_json, detail={"status": exc.status, "code": exc.code}
        ) from None
    except client_errors.APIConnectionError as exc:
        hint = "" if exc.outcome_unknown else "; is `jobgate serve` running?"
        raise VerbError(f"{exc}{hint}", as_json=as_json, detail={"code": "connection"}) from None
    except client_errors.ClientError as exc:
        raise VerbError(str(exc), as_json=as_json) from None


@contextlib.contextmanager
def connect(url: str, api_key: str | None, as_json: bool) -> Iterator[Client]:
    key = api_key_for(url, api_key, as_json)
    with reported(as_json), Client(url, key) as client:
        yield client
