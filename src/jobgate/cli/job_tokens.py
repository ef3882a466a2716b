"""Operator command: rotate the secret that signs job tokens (`jobgate job-tokens rotate`)."""

from __future__ import annotations

import click

from jobgate.cli import help_format
from jobgate.cli.common import emit, load_for_operator, with_runtime
from jobgate.process.runtime import Runtime


@click.group("job-tokens", cls=help_format.WholeHelpGroup)
def job_tokens() -> None:
    """Manage the secret that signs job tokens (jgt_…)."""


@job_tokens.command("rotate")
@click.option(
    "--revoke",
    is_flag=True,
    help="Also void every token issued so far (else they work until they expire).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.option("--database-url", help="sqlite:///path or postgresql://… (JOBGATE_DATABASE_URL).")
def rotate(revoke: bool, as_json: bool, database_url: str | None) -> None:
    """Sign new job tokens with a new secret. Every API process uses it within 5 seconds."""

    async def work(runtime: Runtime) -> int:
        return await runtime.job_tokens.rotate(revoke=revoke)

    generation = with_runtime(load_for_operator(database_url), work)
    kept = "revoked" if revoke else "valid until they expire"
    emit(
        {"generation": generation, "revoked_older": revoke},
        as_json=as_json,
        text=f"job-token secret rotated (generation {generation}); earlier tokens {kept}",
    )


COMMANDS = (job_tokens,)
