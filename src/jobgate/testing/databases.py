"""Throwaway databases for tests: SQLite files, and PostgreSQL databases cloned from a migrated
template (CREATE DATABASE ... TEMPLATE is much faster than migrating every time)."""

from __future__ import annotations

import os
import secrets
import urllib.parse

import asyncpg

from jobgate.storage.postgres.store import PostgresStorage

DEFAULT_ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/test"


def admin_dsn() -> str:
    return os.environ.get("JOBGATE_TEST_DATABASE_URL", DEFAULT_ADMIN_DSN)


def dsn_for(database: str, base: str | None = None) -> str:
    parts = urllib.parse.urlsplit(base or admin_dsn())
    return urllib.parse.urlunsplit(parts._replace(path=f"/{database}"))


async def postgres_available() -> bool:
    try:
        conn = await asyncpg.connect(admin_dsn(), timeout=3)
    except (OSError, asyncpg.PostgresError, TimeoutError):
        return False
    await conn.close()
    return True


class PostgresTemplate:
    """A migrated template database and fresh clones of it."""

    def __init__(self) -> None:
        self.name = f"jobgate_tmpl_{os.getpid()}_{secrets.token_hex(3)}"
        self._clones: list[str] = []

    async def create(self) -> None:
        await self._admin(f'CREATE DATABASE "{self.name}"')
        storage = PostgresStorage(dsn_for(self.name), pool_size=1)
        await storage.open()
        try:
            await storage.migrate()
        finally:
            await storage.close()

    async def clone(self) -> str:
        """A new migrated database; returns its DSN."""
        name = f"jobgate_t_{secrets.token_hex(6)}"
        await self._admin(f'CREATE DATABASE "{name}" TEMPLATE "{self.name}"')
        self._clones.append(name)
        return dsn_for(name)

    async def drop_clone(self, dsn: str) -> None:
        name = urllib.parse.urlsplit(dsn).path.lstrip("/")
        await self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if name in self._clones:
            self._clones.remove(name)

    async def drop(self) -> None:
        for name in list(self._clones):
            await self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self._clones.clear()
        await self._admin(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')

    @staticmethod
    async def _admin(statement: str) -> None:
        conn = await asyncpg.connect(admin_dsn(), timeout=10)
        try:
            await conn.execute(statement)
        finally:
            await conn.close()
