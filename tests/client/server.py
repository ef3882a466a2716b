"""A real `jobgate serve` process for client tests: temp database, temp XDG_CONFIG_HOME, port 0
(or a given port, to restart on the same address), stdout parsed for the URL and the key."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

START_TIMEOUT_S = 60.0
_URL = re.compile(r"listening on (http://\S+)")
_KEY = re.compile(r"^\s+(jg_\S+)\s*$")
JOBGATE = [sys.executable, "-c", "from jobgate.cli import main; main()"]


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without the developer's JOBGATE_* settings, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBGATE_")}
    env.update(extra)
    return env


class JobgateServer:
    def __init__(
        self,
        workdir: Path,
        *,
        database_url: str | None = None,
        port: int = 0,
        failpoints: str = "",
        api_key: str | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.workdir = workdir
        self.config_home = workdir / "config"
        self.database_url = database_url or f"sqlite:///{workdir / 'jobgate.db'}"
        self.port = port
        self.failpoints = failpoints
        self.extra_env = env or {}
        self.url = ""
        self.api_key = api_key or ""
        self.process: subprocess.Popen[str] | None = None
        self.stderr_path = workdir / f"server-{time.monotonic_ns()}.err"
        self._stderr: IO[str] | None = None

    def env(self, **extra: str) -> dict[str, str]:
        """An environment for CLI processes that talk to this server."""
        return clean_env(XDG_CONFIG_HOME=str(self.config_home), **extra)

    def start(self) -> JobgateServer:
        env = clean_env(
            XDG_CONFIG_HOME=str(self.config_home),
            JOBGATE_DATABASE_URL=self.database_url,
            JOBGATE_LOG_LEVEL="warning",
            JOBGATE_FAILPOINTS=self.failpoints,
            **self.extra_env,
        )
        self._stderr = open(self.stderr_path, "w")  # closed in _close()
        self.process = subprocess.Popen(
            [*JOBGATE, "serve", "--port", str(self.port)],
            cwd=self.workdir,
            env=env,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            start_new_session=True,
        )
        assert self.process.stdout is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError(f"jobgate serve exited early:\n{self.stderr()}")
            if match := _URL.search(line):
                self.url = match.group(1)
                self.port = int(self.url.rsplit(":", 1)[1])
                if self.api_key:  # a restart: the key was printed by the first start
                    break
            elif match := _KEY.match(line):
                self.api_key = match.group(1)
                break
        else:
            raise RuntimeError("jobgate serve did not start in time")
        return self

    def stderr(self) -> str:
        return self.stderr_path.read_text() if self.stderr_path.exists() else ""

    def wait_for_stderr(self, text: str, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while text not in self.stderr():
            if time.monotonic() > deadline:
                raise AssertionError(f"server never wrote {text!r}:\n{self.stderr()}")
            time.sleep(0.05)

    def signal(self, signum: int) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signum)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.signal(signal.SIGKILL)
            self.process.wait(timeout=30)
        self._close()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()
        self._close()

    def _close(self) -> None:
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None


def wait_until(condition: object, timeout_s: float = 30.0, message: str = "condition") -> None:
    """Poll `condition()` until true, with a generous deadline (the machine is shared)."""
    assert callable(condition)
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {message}")
        time.sleep(0.05)
