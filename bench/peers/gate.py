"""A start gate for drain worker processes: each child gets ready (imports, connections),
prints `ready`, waits for `go` on stdin, drains, then prints when it finished on the
system-wide monotonic clock, which every process on the host shares."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable, Sequence

from bench import procs
from bench.context import RunContext


async def child(ready: Callable[[], Awaitable[Callable[[], Awaitable[None]]]]) -> None:
    """Run in the child: `ready()` prepares and returns the drain coroutine factory."""
    drain = await ready()
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    started = time.monotonic()
    await drain()
    print(json.dumps({"started": started, "finished": time.monotonic()}), flush=True)


async def run_children(
    ctx: RunContext, name: str, module: str, args_per_child: Sequence[Sequence[str]]
) -> float:
    """Start the children, open the gate for all at once, return the seconds until the last
    one finished."""
    children = [
        procs.start_python(
            f"{name}-{index}",
            module,
            list(args),
            workdir=ctx.workdir,
            log_dir=ctx.log_dir,
            stdin=True,
        )
        for index, args in enumerate(args_per_child)
    ]
    try:
        for proc in children:
            line = await asyncio.to_thread(proc.line, 120)
            if line != "ready":
                raise RuntimeError(f"{proc.name}: expected 'ready', got {line!r}")
        opened = time.monotonic()
        for proc in children:
            proc.send("go\n")
        finished = []
        for proc in children:
            answer = json.loads(await asyncio.to_thread(proc.line, 900))
            finished.append(float(answer["finished"]))
        for proc in children:
            await asyncio.to_thread(proc.wait, 60)
    finally:
        for proc in children:
            await asyncio.to_thread(proc.stop)
    return max(finished) - opened
