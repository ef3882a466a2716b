"""Child processes of a run: jobgate roles and load generators, their logs and their memory."""

from __future__ import annotations

import contextlib
import os
import queue
import re
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

_LISTENING = re.compile(r"listening on (http://\S+)")

# Set by `python -m bench.profile`: called with each jobgate process once it runs the code
# under measurement (at start for roles, on its "draining" line for the SQLite drain).
PROFILE_HOOK: Callable[[Proc], None] | None = None


class Proc:
    """A child process whose stdout lines can be awaited and whose stderr goes to a log file
    (never an unread pipe, which would stall a chatty child)."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path,
        log_dir: Path,
        stdin: bool = False,
    ) -> None:
        self.name = name
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"{name}.log"
        self._log = open(self.log_path, "ab")  # closed in stop()
        self.popen = subprocess.Popen(
            list(argv),
            env=dict(env),
            cwd=cwd,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._log,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, name=f"{name}-stdout", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.popen.pid

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for raw in self.popen.stdout:
            self._log.write(b"[stdout] " + raw)
            self._log.flush()
            self._lines.put(raw.decode(errors="replace").rstrip("\n"))
        self._lines.put(None)

    def line(self, timeout_s: float) -> str:
        """The next stdout line; raises RuntimeError on timeout or exit."""
        try:
            line = self._lines.get(timeout=timeout_s)
        except queue.Empty:
            raise RuntimeError(f"{self.name}: no output within {timeout_s} s") from None
        if line is None:
            raise RuntimeError(f"{self.name} exited ({self.popen.poll()}); see {self.log_path}")
        return line

    def wait_for(self, pattern: re.Pattern[str], timeout_s: float = 60) -> re.Match[str]:
        deadline = time.monotonic() + timeout_s
        while True:
            line = self.line(max(0.1, deadline - time.monotonic()))
            match = pattern.search(line)
            if match:
                return match

    def send(self, text: str) -> None:
        assert self.popen.stdin is not None
        self.popen.stdin.write(text.encode())
        self.popen.stdin.flush()

    def rss_bytes(self) -> int:
        return rss_bytes(self.pid)

    def stop(self, timeout_s: float = 30) -> int | None:
        """SIGTERM, then SIGKILL after `timeout_s`; returns the exit code."""
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        self._reader.join(timeout=5)
        with contextlib.suppress(OSError):
            if self.popen.stdin is not None:
                self.popen.stdin.close()
        self._log.close()
        return self.popen.returncode

    def wait(self, timeout_s: float) -> int:
        return self.popen.wait(timeout_s)


def rss_bytes(pid: int) -> int:
    """Resident memory of one process (VmRSS), in bytes."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def raise_file_limit(wanted: int) -> int:
    """Raise this process's (and so its children's) open-file limit towards `wanted`."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def jobgate_env(database_url: str, workdir: Path, **settings: object) -> dict[str, str]:
    """A clean environment for jobgate processes: only the settings given here, no stray
    JOBGATE_* from the caller, no jobgate.toml (the working directory is the run's own)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBGATE_")}
    env["JOBGATE_DATABASE_URL"] = database_url
    env["XDG_CONFIG_HOME"] = str(workdir / "config")
    env["JOBGATE_SHUTDOWN_GRACE_S"] = "0"
    for key, value in settings.items():
        env[f"JOBGATE_{key.upper()}"] = str(value)
    return env


def start_jobgate(
    name: str, args: Sequence[str], *, env: Mapping[str, str], workdir: Path, log_dir: Path
) -> Proc:
    proc = Proc(
        name,
        [sys.executable, "-m", "jobgate.cli", *args],
        env=env,
        cwd=workdir,
        log_dir=log_dir,
    )
    if PROFILE_HOOK is not None:
        PROFILE_HOOK(proc)
    return proc


def start_apis(
    name: str, count: int, *, env: Mapping[str, str], workdir: Path, log_dir: Path
) -> list[Proc]:
    """`count` `jobgate api` processes on free ports, named `{name}-api{index}`."""
    return [
        start_jobgate(
            f"{name}-api{index}", ["api", "--port", "0"], env=env, workdir=workdir, log_dir=log_dir
        )
        for index in range(count)
    ]


def wait_listening(proc: Proc, timeout_s: float = 60) -> str:
    """The base URL a jobgate API process printed in its banner."""
    return proc.wait_for(_LISTENING, timeout_s).group(1)


def start_python(
    name: str,
    module: str,
    args: Sequence[str],
    *,
    workdir: Path,
    log_dir: Path,
    stdin: bool = False,
    env: Mapping[str, str] | None = None,
) -> Proc:
    """`python -m <module> args` with the harness importable (for load generators, peers)."""
    root = str(Path(__file__).resolve().parent.parent)
    environment = dict(env if env is not None else os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(
        p for p in (root, environment.get("PYTHONPATH", "")) if p
    )
    return Proc(
        name,
        [sys.executable, "-m", module, *args],
        env=environment,
        cwd=workdir,
        log_dir=log_dir,
        stdin=stdin,
    )


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far."""
    return cpu_seconds_at(Path(f"/proc/{pid}/stat"))


def cpu_seconds_at(stat_path: Path) -> float:
    """User + system CPU time from a /proc stat file (a process's or one of its threads')."""
    with open(stat_path) as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def cpu_of(pids: list[int]) -> dict[int, float]:
    """CPU seconds per process, skipping those that are gone or not readable."""
    used = {}
    for pid in pids:
        try:
            used[pid] = cpu_seconds(pid)
        except (OSError, IndexError, ValueError):
            continue
    return used


def cpu_delta(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds used between two snapshots (processes born in between count whole)."""
    return sum(used - before.get(pid, 0.0) for pid, used in after.items())
