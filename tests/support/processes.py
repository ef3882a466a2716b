"""Real jobgate processes for tests: start a role with its environment, wait until it is ready,
crash it (SIGKILL), freeze it (SIGSTOP / SIGCONT), stop it gracefully (SIGTERM), read its logs,
and always clean up.

    with ProcessHarness(tmp_path, env={"JOBGATE_DATABASE_URL": dsn}) as harness:
        api = harness.start("api")            # waits for the listening line and /healthz
        worker = harness.start("worker", env={"JOBGATE_FAILPOINTS": "after_provider_response=kill"})
        ...
        worker.kill()                          # kill -9
        assert worker.log_lines_matching("lease lost")

Every process runs in its own session (so a signal reaches only it), writes stdout and stderr
to files under the harness directory, and is killed (SIGCONT first, in case it is stopped) when
the harness closes, even when the test fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, TypeAlias, TypeVar

import httpx

T = TypeVar("T")

_LISTENING = re.compile(r"listening on (http://\S+)")
_RUNNING = re.compile(r"^jobgate \S+ running ")

# Settings that make leases, heartbeats, retries and polling quick enough for tests.
FAST_ENV: dict[str, str] = {
    "JOBGATE_LEASE_TTL_S": "3",
    "JOBGATE_HEARTBEAT_INTERVAL_S": "0.5",
    "JOBGATE_REAPER_INTERVAL_S": "0.5",
    "JOBGATE_RETRY_BASE_S": "0.05",
    "JOBGATE_RETRY_MAX_S": "0.2",
    "JOBGATE_WORKER_POLL_INTERVAL_S": "0.2",
    "JOBGATE_SHUTDOWN_GRACE_S": "1",
    "JOBGATE_LOG_LEVEL": "info",
}


class ProcessError(AssertionError):
    """A process did not become ready, or exited when it should not have."""


# What a wait_until predicate answers for "not yet".
Falsy: TypeAlias = Literal[False, 0, ""] | None


def wait_until(
    predicate: Callable[[], T | Falsy],
    *,
    timeout_s: float = 30.0,
    interval_s: float = 0.05,
    what: str = "",
) -> T:
    """Poll `predicate` until it returns something truthy (returned); AssertionError after
    `timeout_s`. Use generous deadlines: CI machines are shared and slow. A predicate may
    answer None, False, 0 or "" for "not yet" (`x and y` style), which is never returned."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what or predicate}")
        time.sleep(interval_s)


def free_port() -> int:
    """A port that was free a moment ago: a random one just below the kernel's ephemeral range,
    checked by binding it. A port the kernel picks (bind to 0) lies in that range, where every
    outgoing connection on the machine also takes its local port, so in the second or so
    before the process it is meant for binds it, a connection (a test's, a pool's) could take
    it: seen in CI as EADDRINUSE from a simulator started on such a port. Below the range only
    another pick like this one competes. The kernel's pick if no port there is free."""
    low = _ephemeral_low()
    below = range(max(1024, low - _BELOW_EPHEMERAL), low)
    for _ in range(100 if below else 0):
        port = secrets.choice(below)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue  # in use (a listener, or a connection's local port)
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


_BELOW_EPHEMERAL = 12_000  # how many ports below the ephemeral range free_port picks among


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux's default 32768 elsewhere)."""
    try:
        text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text()
        return int(text.split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


class JobgateProcess:
    """One `python -m jobgate <command>` process."""

    def __init__(
        self, name: str, args: list[str], env: dict[str, str], log_dir: Path, *, cwd: Path
    ) -> None:
        self.name = name
        self.args = args
        self.env = env
        self.cwd = cwd
        self.stdout_path = log_dir / f"{name}.out"
        self.stderr_path = log_dir / f"{name}.err"
        self.url: str | None = None
        self.popen: subprocess.Popen[bytes] | None = None
        self.starts = 0

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> JobgateProcess:
        if self.popen is not None and self.popen.poll() is None:
            raise ProcessError(f"{self.name} is already running")
        self.starts += 1
        mode = "ab"  # a restart appends, so the logs of every incarnation stay together
        with open(self.stdout_path, mode) as out, open(self.stderr_path, mode) as err:
            marker = f"--- start {self.starts} ---\n".encode()
            out.write(marker)
            err.write(marker)
            out.flush()
            err.flush()
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "jobgate", *self.args],
                env=self.env,
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        return self

    def wait_ready(self, *, timeout_s: float = 60.0) -> JobgateProcess:
        """Wait for the start line (and, for an API, for /healthz to answer)."""
        start = self.starts

        def ready() -> bool:
            if not self.alive:
                raise ProcessError(
                    f"{self.name} exited with {self.returncode} before it was ready:\n"
                    + self.tail()
                )
            text = self._incarnation_stdout(start)
            match = _LISTENING.search(text)
            if match is not None:
                self.url = match.group(1)
                return _healthy(self.url)
            return any(_RUNNING.match(line) for line in text.splitlines())

        wait_until(ready, timeout_s=timeout_s, interval_s=0.05, what=f"{self.name} to be ready")
        return self

    @property
    def pid(self) -> int:
        assert self.popen is not None, f"{self.name} was never started"
        return self.popen.pid

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    @property
    def returncode(self) -> int | None:
        return None if self.popen is None else self.popen.poll()

    def signal(self, signum: int) -> None:
        if self.alive:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        """kill -9, and reap the process."""
        if self.popen is None:
            return
        self.signal(signal.SIGKILL)
        self.popen.wait(timeout=30)

    def freeze(self) -> None:
        """SIGSTOP: the process keeps its sockets but runs no code."""
        self.signal(signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT."""
        self.signal(signal.SIGCONT)

    def terminate(self, *, wait: bool = True, timeout_s: float = 60.0) -> int | None:
        """SIGTERM (graceful); by default wait for the exit and return its code."""
        self.signal(signal.SIGTERM)
        if not wait or self.popen is None:
            return None
        return self.popen.wait(timeout=timeout_s)

    def wait_exit(self, *, timeout_s: float = 60.0) -> int:
        assert self.popen is not None
        return self.popen.wait(timeout=timeout_s)

    def restart(self, *, timeout_s: float = 60.0) -> JobgateProcess:
        """Kill (if still running) and start again with the same command and environment."""
        self.kill()
        return self.start().wait_ready(timeout_s=timeout_s)

    def cleanup(self) -> None:
        if self.alive:
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGKILL)
        if self.popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=30)

    # -- output ------------------------------------------------------------------------

    def stdout(self) -> str:
        return _read(self.stdout_path)

    def stderr(self) -> str:
        return _read(self.stderr_path)

    def _incarnation_stdout(self, start: int) -> str:
        return self.stdout().split(f"--- start {start} ---\n", 1)[-1]

    def log_records(self) -> list[dict[str, Any]]:
        """The JSON log lines of every incarnation (other stderr lines are skipped)."""
        records = []
        for line in self.stderr().splitlines():
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    records.append(json.loads(line))
        return records

    def log_lines_matching(self, pattern: str) -> list[str]:
        compiled = re.compile(pattern)
        return [line for line in self.stderr().splitlines() if compiled.search(line)]

    def tail(self, lines: int = 40) -> str:
        out = self.stdout().splitlines()[-lines:]
        err = self.stderr().splitlines()[-lines:]
        return "\n".join([f"== {self.name} stdout ==", *out, f"== {self.name} stderr ==", *err])


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


class ProcessHarness:
    """Starts jobgate processes and guarantees they are gone when it closes."""

    def __init__(
        self,
        directory: Path,
        *,
        env: Mapping[str, str] | None = None,
        fast: bool = True,
    ) -> None:
        self.directory = Path(directory)
        self.log_dir = self.directory / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        base = {k: v for k, v in os.environ.items() if not k.startswith("JOBGATE_")}
        base["XDG_CONFIG_HOME"] = str(self.directory / "config")
        base["PYTHONUNBUFFERED"] = "1"
        if fast:
            base.update(FAST_ENV)
        base.update(env or {})
        self.env = base
        self.processes: list[JobgateProcess] = []
        self._names: dict[str, int] = {}

    def __enter__(self) -> ProcessHarness:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def process(
        self,
        command: str,
        *args: str,
        env: Mapping[str, str] | None = None,
        name: str | None = None,
    ) -> JobgateProcess:
        """Prepare (without starting) `jobgate <command> <args>`."""
        base_name = name or command
        count = self._names.get(base_name, 0)
        self._names[base_name] = count + 1
        unique = base_name if count == 0 else f"{base_name}-{count + 1}"
        merged = {**self.env, **(env or {})}
        process = JobgateProcess(unique, [command, *args], merged, self.log_dir, cwd=self.directory)
        self.processes.append(process)
        return process

    def start(
        self,
        command: str,
        *args: str,
        env: Mapping[str, str] | None = None,
        name: str | None = None,
        ready: bool = True,
        timeout_s: float = 60.0,
    ) -> JobgateProcess:
        """Start `jobgate <command> <args>`; by default wait until it is ready.

        An API (`api`, `serve`) without `--port` gets a free port, so a restart keeps its URL.
        """
        if command in ("api", "serve") and "--port" not in args:
            args = (*args, "--port", str(free_port()))
        process = self.process(command, *args, env=env, name=name).start()
        if ready:
            process.wait_ready(timeout_s=timeout_s)
        return process

    def run(
        self, command: str, *args: str, env: Mapping[str, str] | None = None, timeout_s: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run a short command (migrate, tenants create) to completion; raise on failure."""
        result = subprocess.run(
            [sys.executable, "-m", "jobgate", command, *args],
            env={**self.env, **(env or {})},
            cwd=self.directory,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        if result.returncode != 0:
            raise ProcessError(
                f"jobgate {command} {' '.join(args)} exited {result.returncode}:\n"
                f"{result.stdout}\n{result.stderr}"
            )
        return result

    def create_tenant(self, name: str, env: Mapping[str, str] | None = None) -> str:
        """`jobgate tenants create NAME --json`; returns the API key."""
        out = self.run("tenants", "create", name, "--json", env=env).stdout
        return str(json.loads(out)["api_key"])

    def default_api_key(self, url: str) -> str:
        """The key `serve` saved for its default tenant."""
        path = self.directory / "config" / "jobgate" / "credentials.json"
        return str(json.loads(path.read_text())[url]["api_key"])

    def logs(self) -> str:
        return "\n".join(process.tail(200) for process in self.processes)

    def close(self) -> None:
        for process in self.processes:
            process.cleanup()

    @contextlib.contextmanager
    def frozen(self, process: JobgateProcess) -> Iterator[None]:
        """SIGSTOP for the duration of the block, SIGCONT after (even on failure)."""
        process.freeze()
        try:
            yield
        finally:
            process.thaw()
