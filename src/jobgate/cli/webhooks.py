"""The `dispatcher` command: run only the webhook dispatcher (also a role of `jobgate serve`)."""

from __future__ import annotations

import click

from jobgate.cli.server import _db, _start
from jobgate.services import dispatcher as _registers_the_role  # noqa: F401


@click.command()
@_db
def dispatcher(database_url: str | None) -> None:
    """Run only the webhook dispatcher (safe to run several)."""
    _start(("dispatcher",), database_url=database_url)


COMMANDS = (dispatcher,)
