"""The `dispatcher` command: run only the webhook dispatcher (also a role of `jobgate serve`)."""

from __future__ import annotations

import click

from jobgate.cli.server import _db, _start


@click.command()
@_db
def dispatcher(database_url: str | None) -> None:
    """Run only the webhook dispatcher (safe to run several)."""
    _start(("dispatcher",), database_url=database_url)


COMMANDS = (dispatcher,)
