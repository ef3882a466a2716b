"""A private PgBouncer in transaction mode for tests: Debian's `pgbouncer` on a free port of
127.0.0.1, in front of a PostgreSQL server, passing every database name through:

    with PgBouncer(upstream=admin_dsn()) as bouncer:
        pooled = bouncer.dsn_for(direct_dsn)   # the same database, through the pooler

Transaction mode is what a managed PostgreSQL's pooler usually runs: a server connection is
lent to a client for one transaction only, so nothing a session holds (named prepared
statements, session settings, LISTEN) survives from one transaction to the next. Every
connection authenticates as trusted (the test servers trust 127.0.0.1). PgBouncer refuses to
run as root: under root it drops to the `postgres` user. `close()` stops it and deletes its
directory.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.parse
from pathlib import Path
from types import TracebackType

from tests.support.processes import free_port


def find_binary() -> str | None:
    """Where `pgbouncer` is: on PATH, else Debian's /usr/sbin (not on a user's PATH)."""
    return shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin:/usr/bin")


def available() -> bool:
    return find_binary() is not None


class PgBouncer:
    """One pgbouncer process; `dsn_for(dsn)` names `dsn`'s database through it."""

    def __init__(self, *, upstream: str, pool_size: int = 20) -> None:
        binary = find_binary()
        if binary is None:
            raise RuntimeError("pgbouncer not found (Debian: apt-get install pgbouncer)")
        self.binary = binary
        parts = urllib.parse.urlsplit(upstream)
        self.upstream_host = parts.hostname or "127.0.0.1"
        self.upstream_port = parts.port or 5432
        self.user = parts.username or "postgres"
        self.pool_size = pool_size
        self.directory = Path(tempfile.mkdtemp(prefix="jobgate-pgbouncer-"))
        self.log_path = self.directory / "pgbouncer.log"
        self.port = free_port()
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> PgBouncer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def dsn_for(self, dsn: str) -> str:
        """`dsn`'s user and database, through this pooler."""
        parts = urllib.parse.urlsplit(dsn)
        user = parts.username or self.user
        return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}@127.0.0.1:{self.port}"))

    def start(self) -> PgBouncer:
        config = self.directory / "pgbouncer.ini"
        users = self.directory / "users.txt"
        users.write_text(f'"{self.user}" ""\n')
        config.write_text(self._config(users))
        command = [self.binary, str(config)]
        if os.geteuid() == 0:
            owner = pwd.getpwnam("postgres")
            for path in (self.directory, config, users):
                os.chown(path, owner.pw_uid, owner.pw_gid)
            command = [self.binary, "-u", "postgres", str(config)]
        self._process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/"
        )
        self._wait_listening()
        return self

    def _config(self, users: Path) -> str:
        return "\n".join([
            "[databases]",
            f"* = host={self.upstream_host} port={self.upstream_port}",
            "[pgbouncer]",
            "listen_addr = 127.0.0.1",
            f"listen_port = {self.port}",
            "unix_socket_dir =",
            "auth_type = trust",
            f"auth_file = {users}",
            "pool_mode = transaction",
            "max_client_conn = 1000",
            f"default_pool_size = {self.pool_size}",
            "server_idle_timeout = 10",
            f"logfile = {self.log_path}",
            "",
        ])  # fmt: skip

    def _wait_listening(self) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                raise RuntimeError(f"pgbouncer exited at start:\n{self.log()[-2000:]}")
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=1),
            ):
                return
            time.sleep(0.05)
        raise RuntimeError(f"pgbouncer did not listen within 30 s:\n{self.log()[-2000:]}")

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    def close(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)  # pgbouncer: SIGTERM shuts down at once
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        shutil.rmtree(self.directory, ignore_errors=True)
