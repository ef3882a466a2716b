"""A private, throwaway PostgreSQL cluster for destructive tests (crash restarts, shutdowns)
that must never touch a shared server:

    with PrivateCluster(tmp_path / "pg") as cluster:
        dsn = cluster.create_database("jobgate")
        cluster.restart(mode="immediate")      # a crash: no checkpoint, recovery on start

initdb runs as the `postgres` user when the tests run as root (PostgreSQL refuses root), into
a temporary directory; the server listens on 127.0.0.1 on a free port, with its socket in the
same directory. `close()` stops it (immediate) and deletes everything.

`standby()` makes a streaming replica of a running cluster (pg_basebackup -R, over
replication on 127.0.0.1, which initdb's trust rules allow), started like any other:

    replica = cluster.standby().start()   # hot standby on its own port, replaying the WAL
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType

import asyncpg

from tests.support.processes import free_port


def find_bindir() -> Path | None:
    """The directory of initdb and pg_ctl: $JOBGATE_PG_BINDIR, pg_config, or the newest
    /usr/lib/postgresql/N/bin."""
    explicit = os.environ.get("JOBGATE_PG_BINDIR")
    if explicit:
        return Path(explicit)
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]))
    for candidate in reversed(candidates):
        if (Path(candidate) / "initdb").exists():
            return Path(candidate)
    pg_config = shutil.which("pg_config")
    if pg_config:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False)
        path = Path(out.stdout.strip())
        if (path / "initdb").exists():
            return path
    return None


def available() -> bool:
    return find_bindir() is not None and (os.geteuid() != 0 or _postgres_user() is not None)


def _postgres_user() -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam("postgres")
    except KeyError:
        return None


class PrivateCluster:
    def __init__(self, directory: Path | None = None, *, port: int | None = None) -> None:
        bindir = find_bindir()
        if bindir is None:
            raise RuntimeError("PostgreSQL server binaries not found (set JOBGATE_PG_BINDIR)")
        self.bindir = bindir
        self._owned_dir = directory is None
        self.directory = Path(directory or tempfile.mkdtemp(prefix="jobgate-pg-"))
        self.data_dir = self.directory / "data"
        self.log_path = self.directory / "server.log"
        self.port = port or free_port()
        self.started = False
        self._as_postgres = os.geteuid() == 0

    # -- lifecycle ---------------------------------------------------------------------

    def __enter__(self) -> PrivateCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def start(self) -> PrivateCluster:
        if not self.data_dir.exists():
            self._make_directory()
            self._run(
                "initdb", "-D", str(self.data_dir), "-U", "postgres", "--auth=trust",
                "--no-sync", "-E", "UTF8", "--locale=C",
            )  # fmt: skip
        self._pg_ctl("start", "-w", "-t", "60", "-l", str(self.log_path), "-o", self._options())
        self.started = True
        return self

    def standby(self, directory: Path | None = None) -> PrivateCluster:
        """A streaming replica of this (running) cluster, not started: its data directory is
        a base backup with the standby's settings (`-R`: standby.signal and primary_conninfo
        naming this cluster's port), so `start()` runs it as a hot standby on its own port."""
        replica = PrivateCluster(directory)
        replica._make_directory()
        replica._run(
            "pg_basebackup", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
            "-D", str(replica.data_dir), "-R", "-X", "stream", "--no-sync", "-c", "fast",
        )  # fmt: skip
        return replica

    def _make_directory(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        if self._as_postgres:
            user = _postgres_user()
            assert user is not None
            os.chown(self.directory, user.pw_uid, user.pw_gid)

    def _options(self) -> str:
        return (
            f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1 "
            "-c max_connections=200 -c shared_buffers=32MB -c fsync=on "
            "-c log_min_messages=warning"
        )

    def restart(self, *, mode: str = "immediate") -> None:
        """`pg_ctl restart -m MODE`: immediate is a crash (recovery replays the WAL)."""
        self._pg_ctl(
            "restart", "-w", "-t", "60", "-m", mode, "-l", str(self.log_path), "-o", self._options()
        )

    def stop(self, *, mode: str = "immediate") -> None:
        if self.started:
            self._pg_ctl("stop", "-w", "-t", "60", "-m", mode)
            self.started = False

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.stop()
        shutil.rmtree(self.directory if self._owned_dir else self.data_dir, ignore_errors=True)

    # -- databases ---------------------------------------------------------------------

    def dsn(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        async def create() -> None:
            conn = await asyncpg.connect(self.dsn(), timeout=10)
            try:
                await conn.execute(f'CREATE DATABASE "{name}"')
            finally:
                await conn.close()

        asyncio.run(create())
        return self.dsn(name)

    # -- plumbing ----------------------------------------------------------------------

    def _pg_ctl(self, *args: str) -> None:
        self._run("pg_ctl", "-D", str(self.data_dir), *args)

    def _run(self, program: str, *args: str) -> None:
        command = [str(self.bindir / program), *args]
        if self._as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=120, check=False, cwd="/"
        )
        if result.returncode != 0:
            log = self.log_path.read_text() if self.log_path.exists() else ""
            raise RuntimeError(
                f"{program} {' '.join(args)} failed ({result.returncode}):\n"
                f"{result.stdout}\n{result.stderr}\n{log[-2000:]}"
            )
