"""`jobgate simulator`: the provider simulator server. It imports no server code, so it starts
in the time the simulator itself takes to load (the reconciler role is in cli/server.py)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import click

from jobgate import logs
from jobgate.simulator.enforcement import Limits
from jobgate.simulator.server import Simulator


async def _simulate(simulator: Simulator, host: str, port: int) -> None:
    try:
        await simulator.start()
    except OSError as exc:
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        raise click.ClickException(f"cannot listen on {host}:{port}: {reason}") from None
    click.echo(
        f"jobgate simulator listening on {simulator.url} "
        f"(OpenAI base_url {simulator.openai_base_url}, Anthropic base_url "
        f"{simulator.anthropic_base_url})"
    )
    sys.stdout.flush()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        await simulator.close()


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--port", type=int, default=9100, show_default=True, help="Port (0 picks one).")
@click.option("--webhook-url", help="Where to POST signed Responses webhooks.")
@click.option(
    "--webhook-secret-env",
    default="JOBGATE_SIMULATOR_WEBHOOK_SECRET",
    show_default=True,
    help="Variable holding the whsec_… secret that signs webhooks.",
)
@click.option(
    "--api-key-env",
    default="JOBGATE_SIMULATOR_API_KEY",
    show_default=True,
    help="Variable holding the API key to require (unset: any key is accepted).",
)
@click.option(
    "--profile",
    type=click.Choice(["realistic", "lenient"]),
    default="realistic",
    show_default=True,
    help="realistic: as OpenAI and Anthropic behave (no deduplication, 400 for a cancel "
    "after the end, batch counts at the end, rate-limit reset headers, request ids); "
    "lenient: the older, kinder simulator.",
)
@click.option(
    "--idempotent/--no-idempotent",
    default=None,
    help="Deduplicate creates by their Idempotency-Key header (a provider that really does; "
    "default: as the profile, i.e. not for realistic).",
)
@click.option(
    "--responses-api/--no-responses-api",
    default=True,
    show_default=True,
    help="Serve OpenAI's Responses API (off: Chat Completions only, like most "
    "OpenAI-compatible servers).",
)
@click.option(
    "--rpm",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    envvar="JOBGATE_SIMULATOR_RPM",
    help="Enforce requests a minute per model, with 429s and the providers' rate-limit "
    "headers (0: no limit). Env: JOBGATE_SIMULATOR_RPM.",
)
@click.option(
    "--tpm",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    envvar="JOBGATE_SIMULATOR_TPM",
    help="Enforce tokens a minute per model (prompt characters / 4 + max_tokens on arrival, "
    "settled to the usage reported). Env: JOBGATE_SIMULATOR_TPM.",
)
@click.option(
    "--rate-window-s",
    type=click.FloatRange(min=0.001),
    default=60.0,
    show_default=True,
    envvar="JOBGATE_SIMULATOR_RATE_WINDOW_S",
    help="A limit's burst: its bucket holds this many seconds of refill (60: a minute's "
    "worth; 1: the limit enforced per second). Env: JOBGATE_SIMULATOR_RATE_WINDOW_S.",
)
def simulator(
    host: str,
    port: int,
    webhook_url: str | None,
    webhook_secret_env: str,
    api_key_env: str,
    profile: str,
    idempotent: bool | None,
    responses_api: bool,
    rpm: int,
    tpm: int,
    rate_window_s: float,
) -> None:
    """Run the provider simulator: OpenAI and Anthropic wire formats with injectable faults."""
    secret = os.environ.get(webhook_secret_env) or None
    if webhook_url and not secret:
        raise click.UsageError(f"--webhook-url needs a secret in ${webhook_secret_env}")
    logs.configure("warning")
    instance = Simulator(
        host=host,
        port=port,
        api_key=os.environ.get(api_key_env) or None,
        webhook_url=webhook_url,
        webhook_secret=secret,
        idempotent=idempotent,
        responses_api=responses_api,
        profile=profile,
        limits=Limits(rpm=rpm, tpm=tpm, window_s=rate_window_s),
    )
    asyncio.run(_simulate(instance, host, port))


COMMANDS = (simulator,)
