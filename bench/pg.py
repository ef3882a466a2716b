"""Throwaway PostgreSQL databases on the benchmark server, created and dropped by the run."""

from __future__ import annotations

import contextlib
import os
import secrets
import urllib.parse
from collections.abc import AsyncIterator
from typing import Any

import asyncpg

DEFAULT_ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
PREFIX = "jgbench_"


def admin_dsn() -> str:
    return os.environ.get("JOBGATE_BENCH_POSTGRES", DEFAULT_ADMIN_DSN)


def dsn_for(database: str) -> str:
    parts = urllib.parse.urlsplit(admin_dsn())
    return urllib.parse.urlunsplit(parts._replace(path=f"/{database}"))


def database_of(dsn: str) -> str:
    return urllib.parse.urlsplit(dsn).path.lstrip("/")


async def admin(statement: str) -> None:
    conn = await asyncpg.connect(admin_dsn(), timeout=10)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


async def available() -> bool:
    try:
        conn = await asyncpg.connect(admin_dsn(), timeout=3)
    except (OSError, asyncpg.PostgresError, TimeoutError):
        return False
    await conn.close()
    return True


async def create(label: str, *, template: str | None = None) -> str:
    """A new empty database (or a copy of `template`); returns its DSN."""
    name = f"{PREFIX}{label}_{secrets.token_hex(4)}"
    clause = f' TEMPLATE "{template}"' if template else ""
    await admin(f'CREATE DATABASE "{name}"{clause}')
    return dsn_for(name)


async def drop(dsn: str) -> None:
    await admin(f'DROP DATABASE IF EXISTS "{database_of(dsn)}" WITH (FORCE)')


async def analyze(dsn: str) -> None:
    """Refresh planner statistics after a bulk load, as autovacuum would given time; every
    system gets the same treatment before it is timed."""
    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        await conn.execute("ANALYZE")
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def fresh(label: str, *, template: str | None = None) -> AsyncIterator[str]:
    dsn = await create(label, template=template)
    try:
        yield dsn
    finally:
        await drop(dsn)


async def server_facts() -> dict[str, Any]:
    """The server's version and the settings that decide write speed and durability."""
    conn = await asyncpg.connect(admin_dsn(), timeout=10)
    try:
        facts: dict[str, Any] = {"version": await conn.fetchval("SHOW server_version")}
        for name in (
            "fsync",
            "synchronous_commit",
            "wal_sync_method",
            "full_page_writes",
            "shared_buffers",
            "max_connections",
        ):
            facts[name] = await conn.fetchval(f"SHOW {name}")
        return facts
    finally:
        await conn.close()


async def backend_pids(conn: asyncpg.Connection, database: str) -> list[int]:
    """The server processes serving `database`, except the asking connection's own."""
    rows = await conn.fetch(
        "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
        database,
    )
    return [int(row["pid"]) for row in rows]
