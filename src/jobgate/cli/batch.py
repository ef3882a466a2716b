"""`jobgate batch`: OpenAI-compatible batches from the command line. `submit` uploads a JSONL
file (streamed from disk), creates the batch and follows it with a progress bar; `status`,
`results` (the output and error files, streamed to disk), `list` and `cancel`. With an
operator key (`--api-key jgo_…`, or `--operator` for the one `jobgate serve` saved) `list`,
`status` and `cancel` reach every tenant's batches.

Exit codes: 0 success (for `submit`, the batch completed); 1 failure (unreachable server,
refused request, unknown batch, the batch failed, expired or was cancelled); 2 bad usage."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import click
import httpx

from jobgate.cli.client_connection import EXIT_USAGE, VerbError, api_key_for, connection_options
from jobgate.client import credentials

TERMINAL = ("completed", "failed", "expired", "cancelled")
STATUSES = ("validating", "in_progress", "finalizing", "cancelling", *TERMINAL)
POLL_S = 1.0


class BatchApi:
    """The few calls the verbs make, over httpx (no server imports)."""

    def __init__(self, url: str, api_key: str, as_json: bool) -> None:
        self.http = httpx.Client(
            base_url=url.rstrip("/"),
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=httpx.Timeout(60.0, connect=10.0),
        )
        self.as_json = as_json

    def __enter__(self) -> BatchApi:
        return self

    def __exit__(self, *exc: object) -> None:
        self.http.close()

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise VerbError(f"cannot reach the server: {exc}", as_json=self.as_json) from None
        if response.is_success:
            return response.json()
        try:
            error = response.json().get("error") or {}
        except ValueError:
            error = {}
        message = error.get("message") or response.text[:200] or response.reason_phrase
        raise VerbError(
            f"{message} ({response.status_code} {error.get('code', '')})".rstrip(),
            exit_code=EXIT_USAGE if response.status_code == 401 else 1,
            as_json=self.as_json,
            detail={"status": response.status_code, "code": error.get("code")},
        )

    def download(self, file_id: str, target: Path) -> int:
        written = 0
        with self.http.stream("GET", f"/v1/files/{file_id}/content") as response:
            if not response.is_success:
                response.read()
                raise VerbError(f"cannot read file {file_id} ({response.status_code})")
            with target.open("wb") as sink:
                for piece in response.iter_bytes():
                    sink.write(piece)
                    written += len(piece)
        return written


def _endpoint_of(path: Path) -> str:
    with path.open("rb") as source:
        for raw in source:
            if raw.strip():
                try:
                    url = json.loads(raw).get("url")
                except (ValueError, AttributeError):
                    url = None
                if isinstance(url, str):
                    return url
                break
    raise VerbError("cannot tell the endpoint from the first line: pass --endpoint", exit_code=2)


def _key(url: str, api_key: str | None, operator: bool, as_json: bool) -> str:
    """--api-key (or JOBGATE_API_KEY); with --operator, the operator key saved for --url."""
    if operator and not api_key:
        saved = credentials.saved_entry(url).get("operator_key")
        if not saved:
            raise VerbError(
                f"no operator key saved for {credentials.normal_url(url)}: pass --api-key "
                "jgo_… (or start `jobgate serve` there, which saves one)",
                exit_code=EXIT_USAGE,
                as_json=as_json,
            )
        return saved
    return api_key_for(url, api_key, as_json)


operator_option = click.option(
    "--operator",
    is_flag=True,
    help="Use the operator key saved for --url: every tenant's batches.",
)


def _show(batch: dict[str, Any], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(batch, ensure_ascii=False))
        return
    counts = batch.get("request_counts") or {}
    tenant = f"{batch['tenant']}  " if batch.get("tenant") else ""
    click.echo(
        f"{tenant}{batch['id']}  {batch['status']}  {counts.get('completed', 0)} completed, "
        f"{counts.get('failed', 0)} failed of {counts.get('total', 0)}"
    )
    for name in ("output_file_id", "error_file_id"):
        if batch.get(name):
            click.echo(f"  {name}: {batch[name]}")
    for error in (batch.get("errors") or {}).get("data") or []:  # why a batch failed
        where = f"line {error['line']}: " if error.get("line") else ""
        click.echo(f"  {where}{error.get('code')}: {error.get('message')}")


@click.group()
def batch() -> None:
    """OpenAI-compatible batches: submit a JSONL file, follow it, fetch its results."""


@batch.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--endpoint", help="Default: the url of the file's first line.")
@click.option("--metadata", "metadata", multiple=True, help="KEY=VALUE (repeatable).")
@click.option("--wait/--no-wait", default=True, show_default=True, help="Follow to the end.")
@connection_options
def submit(
    file: Path,
    endpoint: str | None,
    metadata: tuple[str, ...],
    wait: bool,
    url: str,
    api_key: str | None,
    as_json: bool,
) -> None:
    """Upload FILE (JSONL, one request a line), create a batch and follow it."""
    meta = {}
    for pair in metadata:
        key, sep, value = pair.partition("=")
        if not sep:
            raise VerbError(f"--metadata wants KEY=VALUE, not {pair!r}", exit_code=EXIT_USAGE)
        meta[key] = value
    chosen = endpoint or _endpoint_of(file)
    with BatchApi(url, api_key_for(url, api_key, as_json), as_json) as api:
        with file.open("rb") as source:  # httpx streams the file part from disk
            uploaded = api.call(
                "POST",
                "/v1/files",
                data={"purpose": "batch"},
                files={"file": (file.name, source, "application/jsonl")},
            )
        created = api.call(
            "POST",
            "/v1/batches",
            json={
                "input_file_id": uploaded["id"],
                "endpoint": chosen,
                "completion_window": "24h",
                "metadata": meta or None,
            },
        )
        if not as_json:
            click.echo(
                f"batch {created['id']} created from {file.name} ({uploaded['bytes']} bytes)"
            )
        final = _follow(api, created, as_json) if wait else created
    _show(final, as_json)
    if wait and final["status"] != "completed":
        raise SystemExit(1)


def _follow(api: BatchApi, batch: dict[str, Any], as_json: bool) -> dict[str, Any]:
    """Poll until the batch ends; a progress bar of finished lines on stderr (not with --json)."""
    total = (batch.get("request_counts") or {}).get("total") or 0
    with click.progressbar(length=max(total, 1), label="lines", file=sys.stderr) as bar:
        shown = 0
        while batch["status"] not in TERMINAL:
            time.sleep(POLL_S)
            batch = api.call("GET", f"/v1/batches/{batch['id']}")
            counts = batch.get("request_counts") or {}
            if counts.get("total") and bar.length != counts["total"]:
                bar.length = counts["total"]  # known once the file is validated
            done = counts.get("completed", 0) + counts.get("failed", 0)
            if done > shown and not as_json:
                bar.update(done - shown)
                shown = done
    return batch


@batch.command()
@click.argument("batch_id")
@operator_option
@connection_options
def status(batch_id: str, operator: bool, url: str, api_key: str | None, as_json: bool) -> None:
    """Show a batch's status and request counts."""
    with BatchApi(url, _key(url, api_key, operator, as_json), as_json) as api:
        _show(api.call("GET", f"/v1/batches/{batch_id}"), as_json)


@batch.command("list")
@click.option("--tenant", help="Only this tenant's batches (an operator key's list).")
@click.option("--status", "status_", type=click.Choice(STATUSES), help="Only batches in it.")
@click.option("--limit", type=click.IntRange(1, 100), default=20, show_default=True)
@operator_option
@connection_options
def list_batches(
    tenant: str | None,
    status_: str | None,
    limit: int,
    operator: bool,
    url: str,
    api_key: str | None,
    as_json: bool,
) -> None:
    """List batches, newest first (an operator key: every tenant's)."""
    query: dict[str, Any] = {"limit": limit}
    if tenant is not None:
        query["tenant"] = tenant
    if status_ is not None:
        query["status"] = status_
    with BatchApi(url, _key(url, api_key, operator, as_json), as_json) as api:
        page = api.call("GET", "/v1/batches", params=query)
    for found in page["data"]:
        _show(found, as_json)


@batch.command()
@click.argument("batch_id")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True)
@click.option(
    "--errors",
    "errors_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where to write the error file (default: OUTPUT with .errors.jsonl).",
)
@connection_options
def results(
    batch_id: str,
    output: Path,
    errors_path: Path | None,
    url: str,
    api_key: str | None,
    as_json: bool,
) -> None:
    """Write the batch's output file (successes) and error file (failures) as JSONL."""
    with BatchApi(url, api_key_for(url, api_key, as_json), as_json) as api:
        found = api.call("GET", f"/v1/batches/{batch_id}")
        if found["status"] not in TERMINAL:
            raise VerbError(f"batch {batch_id} is {found['status']}: no results yet")
        written: dict[str, Any] = {}
        if found.get("output_file_id"):
            written["output"] = str(output)
            api.download(found["output_file_id"], output)
        if found.get("error_file_id"):
            target = errors_path or output.with_suffix(".errors.jsonl")
            written["errors"] = str(target)
            api.download(found["error_file_id"], target)
    if as_json:
        click.echo(json.dumps(written))
    else:
        for kind, path in written.items():
            click.echo(f"{kind}: {path}")


@batch.command()
@click.argument("batch_id")
@operator_option
@connection_options
def cancel(batch_id: str, operator: bool, url: str, api_key: str | None, as_json: bool) -> None:
    """Cancel a batch: queued lines are cancelled, finished ones kept."""
    with BatchApi(url, _key(url, api_key, operator, as_json), as_json) as api:
        _show(api.call("POST", f"/v1/batches/{batch_id}/cancel"), as_json)


COMMANDS = (batch,)
