"""The `jobgate` command. Exit codes: 0 success, 1 failure, 2 bad usage or configuration."""

from __future__ import annotations

import sys

import click

import jobgate
from jobgate import errors
from jobgate.cli import admin, bench, server


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(jobgate.__version__, prog_name="jobgate")
def cli() -> None:
    """jobgate: a durable asynchronous job gateway for long-running AI calls."""


for command in (*server.COMMANDS, *admin.COMMANDS, *bench.COMMANDS):
    cli.add_command(command)


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        sys.exit(130)
    except click.UsageError as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        click.echo(f"jobgate: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    except errors.ConfigError as exc:
        click.echo(f"jobgate: configuration error: {exc}", err=True)
        sys.exit(2)
    except errors.StorageUnavailable as exc:
        click.echo(f"jobgate: cannot reach the database: {exc}", err=True)
        sys.exit(1)
    except errors.JobgateError as exc:
        click.echo(f"jobgate: {exc}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
