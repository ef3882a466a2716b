"""How the client verbs print: job summaries, tables, event lines, and the live status line
that `jobgate wait` keeps on a terminal (plain lines when the output is not a terminal)."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, TextIO

import click

from jobgate.client import Job, JobEvent

STATUS_COLOURS = {
    "queued": "cyan",
    "running": "yellow",
    "succeeded": "green",
    "failed": "red",
    "cancelled": "magenta",
    "expired": "magenta",
}
SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
ASCII_SPINNER = "|/-\\"
CLEAR_LINE = "\r\x1b[2K"


def colour_enabled(stream: TextIO) -> bool:
    return stream.isatty() and "NO_COLOR" not in os.environ


def paint(text: str, status: str, *, enabled: bool) -> str:
    colour = STATUS_COLOURS.get(status)
    return click.style(text, fg=colour, bold=status == "succeeded") if enabled and colour else text


def print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False))


def clock_time(unix_s: float | None) -> str:
    if unix_s is None:
        return "-"
    return datetime.fromtimestamp(unix_s, UTC).astimezone().strftime("%H:%M:%S")


def timestamp(unix_s: float | None) -> str:
    if unix_s is None:
        return "-"
    return datetime.fromtimestamp(unix_s, UTC).astimezone().strftime("%Y-%m-%d %H:%M:%S")


def age(unix_s: float | None, now_s: float) -> str:
    """`42s ago`, `3m ago`, `5h ago`, `2d ago`."""
    if unix_s is None:
        return "-"
    seconds = max(0, int(now_s - unix_s))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit} ago"
    return f"{seconds}s ago"


def duration(seconds: float) -> str:
    """`1.4s` (whole seconds stay whole: `3s`), `2m05s`, `1h02m`."""
    if seconds < 60:
        return f"{seconds}s" if isinstance(seconds, int) else f"{seconds:.1f}s"
    minutes, rest = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{rest:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def event_line(event: JobEvent, *, colour: bool) -> str:
    source = event.from_status or "·"
    target = paint(event.to_status, event.to_status, enabled=colour)
    reason = event.reason or ""
    ignored = "  (ignored: already terminal)" if not event.applied else ""
    return f"{clock_time(event.created_at)}  {source} → {target}  {reason} ({event.actor}){ignored}"


def job_details(job: Job, now_s: float, *, colour: bool) -> str:
    """The multi-line view `jobgate status` prints."""
    rows: list[tuple[str, str]] = [
        ("provider", f"{job.provider} ({job.model})" if job.model else job.provider),
        ("endpoint", job.endpoint),
        ("attempt", f"{job.attempt} of {job.max_attempts}"),
        ("created", f"{timestamp(job.created_at)}  ({age(job.created_at, now_s)})"),
    ]
    if job.started_at is not None:
        rows.append(("started", timestamp(job.started_at)))
    if job.completed_at is not None:
        took = duration(job.completed_at - job.created_at)
        rows.append(("completed", f"{timestamp(job.completed_at)}  (after {took})"))
    if job.cancel_requested_at is not None and not job.terminal:
        rows.append(("cancel", f"requested at {timestamp(job.cancel_requested_at)}"))
    if job.phase:
        rows.append(("phase", job.phase))
    if job.metadata:
        rows.append(("metadata", json.dumps(job.metadata, ensure_ascii=False)))
    if job.error is not None:
        rows.append(("error", f"{job.error.code}: {job.error.message}"))
    if job.dead_lettered:
        rows.append(("dead-letter", f"yes (jobgate dlq redrive {job.id})"))
    if job.purged:
        rows.append(("purged", "input and result deleted"))
    text = job.output_text
    if text is not None:
        rows.append(("output", text))
    elif job.result is not None:
        rows.append(("result", json.dumps(job.result, ensure_ascii=False)))
    head = f"{job.id}  {paint(job.status, job.status, enabled=colour)}"
    width = max(len(label) for label, _ in rows)
    body = "\n".join(f"  {label:<{width}}  {_indent(value, width + 4)}" for label, value in rows)
    return f"{head}\n{body}"


def _indent(value: str, by: int) -> str:
    return value.replace("\n", "\n" + " " * by)


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[str]],
    *,
    colour_column: int = -1,
    colour: bool = False,
) -> str:
    """Left-aligned columns; the `colour_column` cells are painted by status."""
    materialised = [list(row) for row in rows]
    widths = [len(h) for h in headers]
    for row in materialised:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    for row in materialised:
        cells = []
        for index, (cell, width) in enumerate(zip(row, widths, strict=True)):
            padded = cell.ljust(width)
            cells.append(paint(padded, cell, enabled=colour) if index == colour_column else padded)
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def job_rows(jobs: Iterable[Job], now_s: float, *, with_error: bool = False) -> list[list[str]]:
    rows = []
    for job in jobs:
        row = [
            job.id,
            job.status,
            job.model or job.provider,
            f"{job.attempt}/{job.max_attempts}",
            age(job.created_at, now_s),
        ]
        if with_error:
            row.append(f"{job.error.code}: {job.error.message}" if job.error else "")
        rows.append(row)
    return rows


class Progress:
    """What `jobgate wait` shows while it waits.

    On a terminal: the transitions as permanent lines, under them one live line (spinner,
    status, elapsed time) redrawn in place. Elsewhere: one plain line per transition, no
    control characters.
    """

    def __init__(self, job_id: str, stream: TextIO | None = None) -> None:
        self.job_id = job_id
        self.stream = stream or sys.stdout
        self.live = self.stream.isatty()
        self.colour = colour_enabled(self.stream)
        encoding = (getattr(self.stream, "encoding", None) or "ascii").lower()
        self.unicode = encoding.startswith("utf")
        self.frames = SPINNER if self.unicode else ASCII_SPINNER
        self.started = time.monotonic()
        self.status = "…"
        self._tick = 0
        self._drawn = False

    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    def transition(self, event: JobEvent) -> None:
        self.status = event.to_status
        if self.live:
            self._clear()
            self._write(f"  {event_line(event, colour=self.colour)}\n")
            self.draw()
        else:
            self._write(f"{self.job_id} {event_line(event, colour=False)}\n")

    def draw(self) -> None:
        """Redraw the live line (on a terminal only)."""
        if not self.live:
            return
        frame = self.frames[self._tick % len(self.frames)]
        self._tick += 1
        status = paint(self.status, self.status, enabled=self.colour)
        self._write(f"{CLEAR_LINE}{frame} {self.job_id}  {status}  {duration(self.elapsed_s())}")
        self._drawn = True

    def finish(self, job: Job | None) -> None:
        """Replace the live line with a summary (or just end it, when interrupted)."""
        if self.live:
            self._clear()
            if job is not None:
                marks = ("✔", "✘") if self.unicode else ("ok", "x")
                mark = marks[0] if job.status == "succeeded" else marks[1]
                summary = f"{mark} {job.id} {job.status} after {duration(self.elapsed_s())}"
                self._write(paint(summary, job.status, enabled=self.colour) + "\n")

    def _clear(self) -> None:
        if self._drawn:
            self._write(CLEAR_LINE)
            self._drawn = False

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()
