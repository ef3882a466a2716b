"""Named failpoints that tests arm through JOBGATE_FAILPOINTS to crash or freeze a process at
an exact point, e.g. `after_provider_response=kill;before_finish_commit=stall@2`.

Actions: `kill` (SIGKILL this process), `stall` (freeze the whole process, event loop included),
`sleep:S` (block for S seconds), `error` (raise FailpointError). `@N` fires only on the N-th hit.
A point may be narrowed to hits carrying a tag: `before_provider_call[sim-poison]=kill` fires
only for jobs of model `sim-poison` (a poison job that kills every worker that runs it).
Off by default, and free when off: `hit()` is one truth test of an empty dict.

Points in the code: after_submit_commit_before_response, before_provider_call (tag: the job's
model), after_provider_response, before_finish_commit, after_finish_commit,
after_webhook_sent_before_mark, role_run (tag: the role; each start of a supervised role),
batch_chunk_jobs_stored (inside the transaction of each input chunk a batch expands, its jobs
written and not yet its lines), batch_chunk_committed (right after that transaction),
provider_batch_intended (a native batch's part written, nothing sent) and
provider_batch_created (its provider batch created, the id not yet recorded).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import time


class FailpointError(RuntimeError):
    """Raised by a failpoint armed with `error`."""


@dataclasses.dataclass(slots=True)
class _Armed:
    action: str
    seconds: float = 0.0
    on_hit: int | None = None  # None: every hit
    hits: int = 0


def parse(spec: str) -> dict[str, _Armed]:
    armed: dict[str, _Armed] = {}
    for item in filter(None, (part.strip() for part in spec.replace(",", ";").split(";"))):
        name, _, action = item.partition("=")
        action, _, nth = action.partition("@")
        kind, _, argument = action.partition(":")
        if kind not in ("kill", "stall", "sleep", "error") or not name:
            raise ValueError(f"bad failpoint {item!r} (name=kill|stall|sleep:S|error[@N])")
        armed[name.strip()] = _Armed(
            kind, float(argument) if kind == "sleep" else 0.0, int(nth) if nth else None
        )
    return armed


_ARMED: dict[str, _Armed] = parse(os.environ.get("JOBGATE_FAILPOINTS", ""))


def arm(spec: str) -> None:
    """Replace the armed failpoints (for in-process tests; processes use the variable)."""
    _ARMED.clear()
    _ARMED.update(parse(spec))


def hit(name: str, tag: str | None = None) -> None:
    """Mark that execution reached `name` (for `tag`); act if a test armed it."""
    if not _ARMED:
        return
    armed = _ARMED.get(name)
    if armed is None and tag is not None:
        armed = _ARMED.get(f"{name}[{tag}]")
        name = f"{name}[{tag}]"
    if armed is None:
        return
    armed.hits += 1
    if armed.on_hit is not None and armed.hits != armed.on_hit:
        return
    sys.stderr.write(f"jobgate failpoint {name}: {armed.action}\n")
    sys.stderr.flush()
    if armed.action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif armed.action == "stall":
        while True:
            time.sleep(3600)
    elif armed.action == "sleep":
        time.sleep(armed.seconds)
    else:
        raise FailpointError(name)
