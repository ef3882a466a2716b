"""A reader trying the docs: a clean environment (a fresh HOME, new directories, no JOBGATE_*
variable, this checkout's `jobgate` and `python3` first on PATH) inside a network namespace of
its own where the kernel allows one, so the documented ports (8000, 9100, 9200) are the real
ones and no other server on the machine is in the way. Every command runs inside it; a
service of the machine (PostgreSQL, Redis) is reached there through `bridge`.

Without namespaces (no `unshare`/`nsenter`, or user namespaces disabled) the commands run on
the machine's own network, and the documented ports must be free.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import IO

DOCUMENTED_PORTS = (8000, 9100, 9200)
# How long a command's background processes get to exit after it ended (e.g. after `kill %1`).
LEFTOVER_GRACE_S = 5.0
_BRIDGE = str(Path(__file__).with_name("port_bridge.py"))
# Run inside the new namespace: bring the loopback interface up, say so, and hold the
# namespace open until the test closes stdin.
_HOLDER = r"""
import fcntl, socket, struct, sys
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
with socket.socket() as s:
    request = struct.pack("16sh22x", b"lo", 0)
    flags = struct.unpack("16sh22x", fcntl.ioctl(s, SIOCGIFFLAGS, request))[1]
    fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sh22x", b"lo", flags | IFF_UP))
print("ready", flush=True)
sys.stdin.read()
"""
_PROBE = r"""
import socket, sys, time
deadline = time.monotonic() + float(sys.argv[2])
while time.monotonic() < deadline:
    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", int(sys.argv[1]))) == 0:
            sys.exit(0)
    time.sleep(0.1)
sys.exit(1)
"""


class ReaderError(AssertionError):
    pass


def clean_env(home: Path) -> dict[str, str]:
    """What a new shell of a new user has: PATH (this checkout's venv first), HOME, a locale."""
    system_path = "/usr/local/bin:/usr/bin:/bin"
    return {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{system_path}",
        "HOME": str(home),
        "LANG": "C.UTF-8",
    }


def _namespace_holder() -> subprocess.Popen[str] | None:
    """A process holding a new user and network namespace, or None where none can be made."""
    command = ["unshare", "--user", "--map-root-user", "--net", "--", sys.executable, "-c"]
    try:
        holder = subprocess.Popen(
            [*command, _HOLDER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
    except FileNotFoundError:
        return None
    assert holder.stdout is not None
    if holder.stdout.readline().strip() != "ready":
        holder.wait(timeout=10)
        return None
    probe = subprocess.run(
        ["nsenter", f"--target={holder.pid}", "--user", "--net", "--preserve-credentials", "true"],
        capture_output=True,
        check=False,
    )
    if probe.returncode != 0:
        _stop_holder(holder)
        return None
    return holder


def _stop_holder(holder: subprocess.Popen[str]) -> None:
    for pipe in (holder.stdin, holder.stdout):
        if pipe is not None:
            pipe.close()
    try:
        holder.wait(timeout=10)
    except subprocess.TimeoutExpired:
        holder.kill()
        holder.wait()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


class Reader:
    """The clean environment and the network every command of one reading runs in."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.home = directory / "home"
        self.logs = directory / "logs"
        for path in (self.home, self.logs):
            path.mkdir(parents=True, exist_ok=True)
        self.env = clean_env(self.home)
        self._holder = _namespace_holder()
        self.isolated = self._holder is not None
        self._background: dict[str, subprocess.Popen[bytes]] = {}
        if not self.isolated:
            busy = [port for port in DOCUMENTED_PORTS if _in_use(port)]
            if busy:
                raise ReaderError(
                    f"no network namespace here (unshare/nsenter) and port(s) {busy} are in "
                    "use: the docs run on their documented ports"
                )

    def __enter__(self) -> Reader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def directory_for(self, name: str) -> Path:
        """A new directory, as a reader opening a terminal somewhere."""
        path = self.directory / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def command(self, argv: list[str]) -> list[str]:
        """`argv` as run inside the reader's network."""
        if self._holder is None:
            return argv
        enter = ["nsenter", f"--target={self._holder.pid}", "--user", "--net"]
        return [*enter, "--preserve-credentials", "--", *argv]

    def run(
        self,
        argv: list[str],
        *,
        cwd: Path,
        timeout_s: float,
        env: Mapping[str, str] | None = None,
    ) -> tuple[subprocess.CompletedProcess[str], bool]:
        """Run to completion, in a session of its own; (result, whether it left processes
        running LEFTOVER_GRACE_S after it ended: they are killed). The output goes through
        files, so that a process left behind holding it does not keep this waiting."""
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            process = subprocess.Popen(
                self.command(argv),
                cwd=cwd,
                env={**self.env, **(env or {})},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                _kill_group(process.pid)
                process.wait()
                raise ReaderError(
                    f"still running after {timeout_s} s:\n--- stdout\n{_read(out)}\n"
                    f"--- stderr\n{_read(err)}"
                ) from None
            deadline = time.monotonic() + LEFTOVER_GRACE_S
            while _group_alive(process.pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            left = _group_alive(process.pid)
            if left:
                _kill_group(process.pid)
            result = subprocess.CompletedProcess(argv, process.returncode, _read(out), _read(err))
        return result, left

    def start(
        self, name: str, argv: list[str], *, cwd: Path, env: Mapping[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        """A long-running process (the server in the reader's first terminal), logging to
        `logs/NAME.out` and `.err`; stopped by `stop` or `close`."""
        with (
            open(self.logs / f"{name}.out", "ab") as out,
            open(self.logs / f"{name}.err", "ab") as err,
        ):
            process = subprocess.Popen(
                self.command(argv),
                cwd=cwd,
                env={**self.env, **(env or {})},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        self._background[name] = process
        return process

    def log(self, name: str) -> str:
        return "".join(
            (self.logs / f"{name}.{kind}").read_text(errors="replace") for kind in ("out", "err")
        )

    def wait_listening(self, port: int, *, name: str, timeout_s: float = 60) -> None:
        """Until something listens on 127.0.0.1:PORT inside the reader's network."""
        process = self._background.get(name)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if process is not None and process.poll() is not None:
                raise ReaderError(f"{name} exited with {process.returncode}:\n{self.log(name)}")
            probe, _ = self.run(
                [sys.executable, "-c", _PROBE, str(port), "2"], cwd=self.directory, timeout_s=30
            )
            if probe.returncode == 0:
                return
        raise ReaderError(f"nothing listens on port {port} after {timeout_s} s:\n{self.log(name)}")

    def bridge(self, port: int, host: str = "127.0.0.1") -> None:
        """HOST:PORT of the machine answers at 127.0.0.1:PORT inside (a no-op when the reader
        shares the machine's network)."""
        if not self.isolated:
            return
        path = str(self.directory / f"bridge-{port}.sock")
        outside = subprocess.Popen(
            [sys.executable, _BRIDGE, "unix-to-tcp", path, host, str(port)],
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        self._background[f"bridge-out-{port}"] = outside
        assert outside.stdout is not None
        with outside.stdout:
            if outside.stdout.readline().strip() != b"ready":
                raise ReaderError(f"the bridge to {host}:{port} did not start")
        inside = self.start(
            f"bridge-in-{port}",
            [sys.executable, _BRIDGE, "tcp-to-unix", str(port), path],
            cwd=self.directory,
        )
        del inside
        self.wait_listening(port, name=f"bridge-in-{port}")

    def stop(self, name: str, *, timeout_s: float = 30) -> int | None:
        """SIGTERM, then SIGKILL after `timeout_s`; the exit code."""
        process = self._background.pop(name, None)
        if process is None:
            return None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            return process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(process.pid)
            return process.wait()

    def close(self) -> None:
        for name in list(self._background):
            process = self._background.pop(name)
            _kill_group(process.pid)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=30)
        if self._holder is not None:
            _stop_holder(self._holder)
            self._holder = None


def _read(file: IO[bytes]) -> str:
    file.seek(0)
    return file.read().decode(errors="replace")


def _in_use(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


@contextlib.contextmanager
def reading(directory: Path) -> Iterator[Reader]:
    with Reader(directory) as reader:
        yield reader
