"""Writing values into stored rows behind the service's back, as a row written before the edge
checked them (or by hand) would hold: for the poison-row tests of every role."""

from __future__ import annotations

import sqlite3
from typing import Any

import asyncpg

from jobgate.storage.postgres.store import PostgresStorage
from jobgate.storage.protocol import Storage
from jobgate.storage.sqlite.store import SqliteStorage, register_functions


async def poke(storage: Storage, table: str, row_id: str, **columns: Any) -> None:
    """UPDATE `table` SET columns WHERE id = row_id, through a connection of its own. Values
    are SQL expressions (so a test can write `'infinity'` or a year-11533 time)."""
    sets = ", ".join(f"{name} = {value}" for name, value in columns.items())
    if isinstance(storage, SqliteStorage):
        conn = sqlite3.connect(storage.path)
        register_functions(conn)  # the job triggers call them
        try:
            conn.execute(f"UPDATE {table} SET {sets} WHERE id = ?", (row_id,))
            conn.commit()
        finally:
            conn.close()
        return
    assert isinstance(storage, PostgresStorage)
    pg = await asyncpg.connect(storage.dsn)
    try:
        await pg.execute(f"UPDATE {table} SET {sets} WHERE id = $1", row_id)
    finally:
        await pg.close()
