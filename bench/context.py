"""What every measurement needs to know about the run it belongs to."""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

from bench.sizes import Sizes


@dataclasses.dataclass
class RunContext:
    sizes: Sizes
    workdir: Path  # scratch space: SQLite files, the jobgate processes' working directory
    log_dir: Path  # every child process's output, kept with the results
    postgres: bool  # measure on PostgreSQL (else SQLite only)
    peers: bool  # measure PgQueuer and procrastinate too
    started: float = dataclasses.field(default_factory=time.monotonic)

    def say(self, message: str) -> None:
        elapsed = time.monotonic() - self.started
        print(f"[{elapsed:7.1f}s] {message}", file=sys.stderr, flush=True)

    def scratch(self, name: str) -> Path:
        path = self.workdir / name
        path.mkdir(parents=True, exist_ok=True)
        return path
