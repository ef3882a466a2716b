"""Client verbs over `jobgate.client`: submit, status, wait, cancel, jobs, dlq, events.

The server and key come from --url / --api-key, then JOBGATE_URL / JOBGATE_API_KEY, then the
key `jobgate serve` saved for that URL. `--json` prints the API's JSON (JSON Lines for events).
Errors are one line on stderr (a JSON object with --json).

Exit codes: 0 success; 1 failure (unreachable server, refused request, unknown job);
2 bad usage or configuration (no or wrong API key, unreadable body); 3 the job failed;
4 the job was cancelled; 5 the job expired; 6 gave up waiting (--timeout); 130 interrupted.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
from collections.abc import Iterator
from typing import Any

import click

from jobgate import clock
from jobgate.cli import client_output as out
from jobgate.cli import help_format, moments
from jobgate.cli.client_connection import (
    EXIT_FAILURE,
    EXIT_USAGE,
    VerbError,
    api_key_for,
    connect,
    connection_options,
    reported,
)
from jobgate.client import AsyncClient, Client, Job, JobStatus
from jobgate.client import errors as client_errors

EXIT_FOR_STATUS = {"succeeded": 0, "failed": 3, "cancelled": 4, "expired": 5}
EXIT_TIMEOUT = 6
STATUSES = [str(status) for status in JobStatus]


def _now_s() -> float:
    return clock.SystemClock().now().timestamp()


def _colour() -> bool:
    return out.colour_enabled(sys.stdout)


# -- submit -------------------------------------------------------------------------------


def _read_request(
    file: Any, message: str | None, model: str | None, as_json: bool
) -> dict[str, Any]:
    """The submit request: a full `{endpoint, body, …}` object, or just the provider body."""

    def usage(text: str) -> VerbError:
        return VerbError(text, exit_code=EXIT_USAGE, as_json=as_json, detail={"code": "usage"})

    if message is not None:
        if file is not None:
            raise usage("give either a body FILE or --message, not both")
        body = {"model": model or "sim-echo", "messages": [{"role": "user", "content": message}]}
        return {"body": body}
    if file is None:
        if sys.stdin.isatty():
            raise usage("give a body FILE, '-' or a pipe for stdin, or --message TEXT")
        file = sys.stdin
    text = file.read()
    try:
        parsed = json.loads(text)
    except ValueError as exc:
        raise usage(f"the body is not valid JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise usage("the body must be a JSON object")
    request = parsed if "body" in parsed and "endpoint" in parsed else {"body": parsed}
    if model is not None:
        request["body"] = {**request["body"], "model": model}
    return request


def _with_latency(body: dict[str, Any], latency_s: float, as_json: bool) -> dict[str, Any]:
    model = body.get("model")
    if not (isinstance(model, str) and model.startswith("sim-")):
        raise VerbError(
            f"--latency simulates a slow provider, so it needs a sim-* model, not {model!r}",
            exit_code=EXIT_USAGE,
            as_json=as_json,
            detail={"code": "usage"},
        )
    sim = body.get("sim")
    return {**body, "sim": {**(sim if isinstance(sim, dict) else {}), "latency_s": latency_s}}


def _metadata(items: tuple[str, ...], as_json: bool) -> dict[str, str]:
    metadata = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise VerbError(
                f"--metadata wants KEY=VALUE, not {item!r}", exit_code=EXIT_USAGE, as_json=as_json
            )
        metadata[key] = value
    return metadata


@click.command()
@click.argument("file", type=click.File("r"), required=False)
@click.option("-m", "--message", help="Submit a chat completion of this one user message.")
@click.option("--model", help="Model (sets body.model; with --message default sim-echo).")
@click.option(
    "--latency",
    type=click.FloatRange(0, 3600),
    metavar="S",
    help="Simulated provider (sim-* models) only: take S seconds to answer (body.sim.latency_s).",
)
@click.option(
    "--endpoint", help="Provider endpoint (default /v1/chat/completions).", metavar="PATH"
)
@click.option("--provider", help="Provider name (default: routed by model).")
@click.option("--metadata", "metadata_items", multiple=True, metavar="KEY=VALUE")
@click.option("--priority", type=click.IntRange(0, 9), help="0 runs first (default 5).")
@click.option("--max-attempts", type=click.IntRange(1, 20))
@click.option("--idempotency-key", help="Repeat a submit safely (default: a fresh one).")
@click.option("--wait", "wait_", is_flag=True, help="Wait for the result (as `jobgate wait`).")
@click.option(
    "--stream",
    "stream_",
    is_flag=True,
    help="Print the output as it is produced (live), then exit with the outcome (as --wait).",
)
@click.option("--timeout", type=click.FloatRange(min=0), help="With --wait: give up after S s.")
@click.option(
    "-q", "--quiet", is_flag=True, help="Print only the job id (or, with --wait, the output)."
)
@connection_options
def submit(
    file: Any,
    message: str | None,
    model: str | None,
    latency: float | None,
    endpoint: str | None,
    provider: str | None,
    metadata_items: tuple[str, ...],
    priority: int | None,
    max_attempts: int | None,
    idempotency_key: str | None,
    wait_: bool,
    stream_: bool,
    timeout: float | None,
    quiet: bool,
    url: str,
    api_key: str | None,
    as_json: bool,
) -> None:
    """Submit a job: the body from FILE, stdin ('-' or a pipe), or --message.

    FILE holds the provider's request body, or a whole submit request
    ({"endpoint": …, "body": …, "metadata": …}).
    """
    request = _read_request(file, message, model, as_json)
    if latency is not None:
        request["body"] = _with_latency(request["body"], latency, as_json)
    options = {k: v for k, v in request.items() if k not in ("endpoint", "body")}
    if metadata_items:
        options["metadata"] = {**options.get("metadata", {}), **_metadata(metadata_items, as_json)}
    for name, value in (
        ("provider", provider),
        ("priority", priority),
        ("max_attempts", max_attempts),
    ):
        if value is not None:
            options[name] = value
    if stream_:
        options["stream"] = True
    with connect(url, api_key, as_json) as client:
        job = client.submit(
            endpoint or request.get("endpoint") or "/v1/chat/completions",
            request["body"],
            idempotency_key=idempotency_key,
            **options,
        )
        if stream_:
            job = _print_stream(client, job, as_json=as_json, quiet=quiet)
    if stream_:
        _report_outcome(job, as_json=as_json, printed=not as_json)
    elif wait_:
        _wait_and_report(url, api_key, job.id, timeout, as_json=as_json, quiet=quiet)
    elif as_json:
        out.print_json(job.raw)
    elif quiet:
        click.echo(job.id)
    else:
        click.echo(f"{job.id} {out.paint(job.status, job.status, enabled=_colour())}")
        click.echo(f"  follow it: jobgate wait {job.id}", err=True)


# -- status, wait, cancel ---------------------------------------------------------------------


@click.command()
@click.argument("job_id")
@connection_options
def status(job_id: str, url: str, api_key: str | None, as_json: bool) -> None:
    """Show a job: status, attempts, times, output or error."""
    with connect(url, api_key, as_json) as client:
        job = client.get(job_id)
    if as_json:
        out.print_json(job.raw)
    else:
        click.echo(out.job_details(job, _now_s(), colour=_colour()))
        note = job.raw.get("note")  # e.g. a background job that no reconciler settles
        if isinstance(note, str):
            click.echo(f"  note       {note}")


@click.command()
@click.argument("job_id")
@click.option("--timeout", type=click.FloatRange(min=0), help="Give up after this many seconds.")
@click.option("-q", "--quiet", is_flag=True, help="No progress; print only the output.")
@connection_options
def wait(
    job_id: str, timeout: float | None, quiet: bool, url: str, api_key: str | None, as_json: bool
) -> None:
    """Wait for a job to finish (long poll), showing its transitions; print its output.

    The exit code tells the outcome: 0 succeeded, 3 failed, 4 cancelled, 5 expired,
    6 still running when --timeout ran out.
    """
    _wait_and_report(url, api_key, job_id, timeout, as_json=as_json, quiet=quiet)


def _wait_and_report(
    url: str,
    api_key: str | None,
    job_id: str,
    timeout_s: float | None,
    *,
    as_json: bool,
    quiet: bool,
) -> None:
    key = api_key_for(url, api_key, as_json)
    progress = None if as_json or quiet else out.Progress(job_id)
    job: Job | None = None
    try:
        with reported(as_json):
            job = asyncio.run(_follow(url, key, job_id, timeout_s, progress))
    except VerbError as exc:
        if progress is not None:
            progress.finish(None)
        raise exc
    except client_errors.WaitTimeout as exc:
        if progress is not None:
            progress.finish(None)
        raise VerbError(
            f"{exc}; keep waiting with: jobgate wait {job_id}",
            exit_code=EXIT_TIMEOUT,
            as_json=as_json,
            detail={"code": "wait_timeout", "status": exc.job.status if exc.job else None},
        ) from None
    except BaseException:
        if progress is not None:
            progress.finish(None)  # end the live line before the interrupt is reported
        raise
    if progress is not None:
        progress.finish(job)
    _report_outcome(job, as_json=as_json)


async def _follow(
    url: str, key: str, job_id: str, timeout_s: float | None, progress: out.Progress | None
) -> Job:
    async with AsyncClient(url, key) as client:
        last_seq = 0

        async def show_transitions(_job: Job) -> None:
            nonlocal last_seq
            if progress is None:
                return
            while True:  # the exact transitions since the last look, from the event log
                page = await client.event_log(job_id, after=last_seq, limit=1000)
                for event in page.data:
                    last_seq = event.seq
                    progress.transition(event)
                if not page.has_more:
                    return

        ticker = None
        if progress is not None and progress.live:
            ticker = asyncio.create_task(_tick(progress))
        try:
            return await client.wait(job_id, timeout_s=timeout_s, on_change=show_transitions)
        finally:
            if ticker is not None:
                ticker.cancel()


async def _tick(progress: out.Progress) -> None:
    while True:
        progress.draw()
        await asyncio.sleep(0.1)


def _print_stream(client: Client, job: Job, *, as_json: bool, quiet: bool) -> Job:
    """`submit --stream`: the job's output as it comes (live output streaming); the job once
    it finished."""
    if as_json:
        return client.wait(job.id)
    if not quiet:
        click.echo(f"{job.id} streaming", err=True)
    for piece in client.stream(job.id):
        if piece.reset:
            click.echo("\n[the job started over on a new attempt]", err=True)
        click.echo(piece, nl=False)
    click.echo()
    return client.get(job.id)


def _report_outcome(job: Job, *, as_json: bool, printed: bool = False) -> None:
    code = EXIT_FOR_STATUS.get(job.status, EXIT_FAILURE)
    if as_json:
        out.print_json(job.raw)
    elif job.status == "succeeded" and not printed:
        text = job.output_text
        click.echo(text if text is not None else json.dumps(job.result, ensure_ascii=False))
    if code == 0:
        return
    reason = f": {job.error.code}: {job.error.message}" if job.error else ""
    raise VerbError(
        f"job {job.id} {job.status}{reason}",
        exit_code=code,
        as_json=as_json,
        detail={"code": f"job_{job.status}", "job_id": job.id},
    )


@click.command()
@click.argument("job_id")
@connection_options
def cancel(job_id: str, url: str, api_key: str | None, as_json: bool) -> None:
    """Cancel a job (idempotent). A running call is stopped by its worker."""
    with connect(url, api_key, as_json) as client:
        before = client.get(job_id)
        job = client.cancel(job_id)
    if as_json:
        out.print_json(job.raw)
    elif before.terminal:
        click.echo(f"{job.id} already {job.status}; nothing to cancel")
    elif job.terminal:
        click.echo(f"{job.id} {out.paint(job.status, job.status, enabled=_colour())}")
    else:
        click.echo(f"{job.id} {job.status}: cancel requested; its worker stops the call")


# -- lists --------------------------------------------------------------------------------


class _JobsGroup(click.Group):
    """`jobgate jobs` lists; `jobgate jobs cancel|redrive|delete` act by filter (cli/bulk.py,
    loaded only when one of them runs)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return ["cancel", "delete", "redrive"]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        from jobgate.cli import bulk

        return bulk.COMMANDS.get(cmd_name)


@click.group(cls=_JobsGroup, invoke_without_command=True)
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=click.Choice(STATUSES),
    help="Only jobs in this status (repeatable).",
)
@click.option(
    "--meta",
    "meta",
    multiple=True,
    metavar="KEY=VALUE",
    help="Only jobs whose metadata holds KEY with exactly this value (repeatable: all).",
)
@click.option("--model", help="Only jobs of this model.")
@click.option("--provider", help="Only jobs of this provider.")
@click.option(
    "--since",
    metavar="WHEN",
    help="Only jobs created at or after WHEN: unix seconds, ISO 8601 or an age (90m, 2h, 7d).",
)
@click.option("--until", metavar="WHEN", help="Only jobs created before WHEN (as --since).")
@click.option("--limit", type=click.IntRange(1, 100), default=20, show_default=True)
@click.option(
    "--after", metavar="JOB_ID", help="Continue after this job (the previous page's last)."
)
@click.option("--all", "all_pages", is_flag=True, help="Every page.")
@connection_options
@click.pass_context
def jobs(
    ctx: click.Context,
    statuses: tuple[str, ...],
    meta: tuple[str, ...],
    model: str | None,
    provider: str | None,
    since: str | None,
    until: str | None,
    limit: int,
    after: str | None,
    all_pages: bool,
    url: str,
    api_key: str | None,
    as_json: bool,
) -> None:
    """List jobs, newest first, or search them (--meta, --model, --provider, --since,
    --until, --status: every one given must hold); or act on many by filter:
    jobs cancel|redrive|delete."""
    if ctx.invoked_subcommand is not None:
        return
    search = _search(meta, model, provider, since, until, as_json)
    search["status"] = statuses or None
    _list_jobs(url, api_key, as_json, search, limit, after, all_pages)


def _search(
    meta: tuple[str, ...],
    model: str | None,
    provider: str | None,
    since: str | None,
    until: str | None,
    as_json: bool,
) -> dict[str, Any]:
    """list()'s filters from `jobgate jobs`' options (a usage error for a malformed one)."""
    search: dict[str, Any] = {"model": model, "provider": provider}
    pairs: dict[str, str] = {}
    for item in meta:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise _usage(f"--meta wants KEY=VALUE, not {item!r}", as_json)
        pairs[key] = value
    search["metadata"] = pairs or None
    times = (("created_after", "--since", since), ("created_before", "--until", until))
    for name, option, when in times:
        try:
            search[name] = None if when is None else moments.unix_seconds(option, when)
        except ValueError as exc:
            raise _usage(str(exc), as_json) from None
    return search


def _jobs_command(search: dict[str, Any]) -> str:
    """`jobgate jobs` with the options of `search`, times as the unix seconds they were read
    as (an age such as 2h would have moved on by the next page)."""
    words = ["jobgate", "jobs"]
    for status in search.get("status") or ():
        words += ["--status", status]
    for key, value in (search.get("metadata") or {}).items():
        words += ["--meta", f"{key}={value}"]
    options = [("--model", "model"), ("--provider", "provider")]
    options += [("--since", "created_after"), ("--until", "created_before")]
    for option, name in options:
        if search.get(name) is not None:
            words += [option, str(search[name])]
    return shlex.join(words)


def _usage(message: str, as_json: bool) -> VerbError:
    return VerbError(message, exit_code=EXIT_USAGE, as_json=as_json, detail={"code": "usage"})


def _list_jobs(
    url: str,
    api_key: str | None,
    as_json: bool,
    search: dict[str, Any],
    limit: int,
    after: str | None,
    all_pages: bool,
) -> None:
    dead_lettered = search.get("dead_lettered")
    with connect(url, api_key, as_json) as client:
        if all_pages:
            found = list(client.iter_jobs(**search))
            has_more, last_id = False, found[-1].id if found else None
        else:
            page = client.list(**search, after=after, limit=limit)
            found, has_more, last_id = page.data, page.has_more, page.last_id
    if as_json:
        listing = {"object": "list", "data": [j.raw for j in found], "has_more": has_more}
        out.print_json({**listing, "last_id": last_id})
        return
    if not found:  # a search's partial page may hold none and still have more after it
        nothing = "no dead-lettered jobs" if dead_lettered else "no jobs"
        click.echo(f"{nothing} in this page" if has_more else nothing)
    else:
        headers = ["ID", "STATUS", "MODEL", "ATTEMPT", "CREATED"]
        if dead_lettered:
            headers.append("ERROR")
        rows = out.job_rows(found, _now_s(), with_error=bool(dead_lettered))
        click.echo(out.table(headers, rows, colour_column=1, colour=_colour()))
    if has_more:
        command = "jobgate dlq list" if dead_lettered else _jobs_command(search)
        click.echo(f"more: {command} --after {last_id}  (or --all)", err=True)


@click.group(cls=help_format.WholeHelpGroup)
def dlq() -> None:
    """Dead-lettered jobs: list them, redrive one."""


@dlq.command("list")
@click.option("--limit", type=click.IntRange(1, 100), default=20, show_default=True)
@click.option("--after", metavar="JOB_ID", help="Continue after this job.")
@click.option("--all", "all_pages", is_flag=True, help="Every page.")
@connection_options
def dlq_list(
    limit: int, after: str | None, all_pages: bool, url: str, api_key: str | None, as_json: bool
) -> None:
    """List jobs that failed for good (attempts exhausted or poison)."""
    search = {"status": ("failed",), "dead_lettered": True}
    _list_jobs(url, api_key, as_json, search, limit, after, all_pages)


@dlq.command("redrive")
@click.argument("job_id")
@connection_options
def dlq_redrive(job_id: str, url: str, api_key: str | None, as_json: bool) -> None:
    """Queue a dead-lettered job again, with a fresh series of attempts."""
    with connect(url, api_key, as_json) as client:
        job = client.retry(job_id)
    if as_json:
        out.print_json(job.raw)
    else:
        click.echo(f"{job.id} redriven: {out.paint(job.status, job.status, enabled=_colour())}")


# -- events -------------------------------------------------------------------------------


@click.command()
@click.argument("job_id")
@click.option("-f", "--follow", is_flag=True, help="Stream new events until the job finishes.")
@click.option("--after", type=click.IntRange(min=0), default=0, help="Start after this seq.")
@connection_options
def events(
    job_id: str, follow: bool, after: int, url: str, api_key: str | None, as_json: bool
) -> None:
    """A job's transition log; --follow streams it live (SSE, resumed if the stream drops)."""
    colour = _colour()
    with connect(url, api_key, as_json) as client:
        if follow:
            stream = client.events(job_id, after=after)
        else:
            stream = _all_events(client, job_id, after)
        for event in stream:
            if as_json:
                click.echo(json.dumps(event.raw, ensure_ascii=False))
            else:
                click.echo(f"{event.seq:>3}  {out.event_line(event, colour=colour)}")


def _all_events(client: Client, job_id: str, after: int) -> Iterator[Any]:
    while True:
        page = client.event_log(job_id, after=after, limit=1000)
        yield from page.data
        if not page.has_more or not page.data:
            return
        after = page.data[-1].seq


COMMANDS = (submit, status, wait, cancel, jobs, dlq, events)
