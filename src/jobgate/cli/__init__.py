"""The `jobgate` command. Exit codes: 0 success, 1 failure, 2 bad usage or configuration;
the client verbs add 3 job failed, 4 job cancelled, 5 job expired, 6 timed out waiting
(see cli/client_verbs.py)."""

from __future__ import annotations

import importlib
import sys

import click

import jobgate
from jobgate import errors
from jobgate.cli import help_format

# Command name -> the module defining it (in its COMMANDS). Modules load only when one of
# their commands runs, so client verbs start without importing the server.
COMMAND_MODULES: dict[str, str] = {
    **dict.fromkeys(
        ("serve", "api", "worker", "reaper", "reconciler", "migrate"), "jobgate.cli.server"
    ),
    **dict.fromkeys(("tenants", "keys", "operators"), "jobgate.cli.admin"),
    "dispatcher": "jobgate.cli.webhooks",
    "simulator": "jobgate.cli.providers",
    "alerts": "jobgate.cli.ops",
    "batch": "jobgate.cli.batch",
    **dict.fromkeys(
        ("submit", "status", "wait", "cancel", "jobs", "dlq", "events"), "jobgate.cli.client_verbs"
    ),
    **dict.fromkeys(("login", "key"), "jobgate.cli.login"),
    "listen": "jobgate.cli.listen",
    "why": "jobgate.cli.why",
    **dict.fromkeys(("pause", "resume", "pauses"), "jobgate.cli.pauses"),
    "job-tokens": "jobgate.cli.job_tokens",
}
# How `jobgate --help` groups the commands; one that is in no group is listed under "Other".
HELP_SECTIONS: dict[str, tuple[str, ...]] = {
    "Server roles (run these)": (
        "serve", "api", "worker", "reaper", "dispatcher", "reconciler", "migrate", "simulator",
    ),
    "Operators (against the database)": ("tenants", "keys", "operators", "job-tokens"),
    "Operators (against a server's API, with an operator key)": ("pause", "resume", "pauses"),
    "Clients (against a server's API)": (
        "submit", "status", "why", "wait", "cancel", "jobs", "events", "dlq", "login", "key",
        "listen",
    ),
}  # fmt: skip


class LazyGroup(help_format.WholeHelpGroup):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMAND_MODULES, *super().list_commands(ctx)})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module_name = COMMAND_MODULES.get(cmd_name)
        if module_name is None:
            return super().get_command(ctx, cmd_name)
        module = importlib.import_module(module_name)
        return next((c for c in module.COMMANDS if c.name == cmd_name), None)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands by section, each with its whole first line (never cut short)."""
        names = self.list_commands(ctx)
        placed = {name for section in HELP_SECTIONS.values() for name in section}
        others = tuple(name for name in names if name not in placed)
        for title, section in [*HELP_SECTIONS.items(), ("Other", others)]:
            rows = help_format.command_rows(self, ctx, [name for name in section if name in names])
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(jobgate.__version__, prog_name="jobgate")
def cli() -> None:
    """jobgate: a durable asynchronous job gateway for long-running AI calls.

    \b
    Exit codes: 0 success, 1 failure, 2 bad usage or configuration,
    3 job failed, 4 job cancelled, 5 job expired, 6 timed out waiting, 130 interrupted.
    """


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
