"""Command listings in `--help` that show each command's whole first line: click cuts it to the
terminal's width with `...`, which hides the end of a sentence a user needed."""

from __future__ import annotations

from collections.abc import Sequence

import click


def command_rows(
    group: click.Group, ctx: click.Context, names: Sequence[str]
) -> list[tuple[str, str]]:
    rows = []
    for name in names:
        command = group.get_command(ctx, name)
        if command is not None and not command.hidden:
            rows.append((name, command.get_short_help_str(limit=500)))
    return rows


class WholeHelpGroup(click.Group):
    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = command_rows(self, ctx, self.list_commands(ctx))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)
