"""Writing values into stored rows behind the service's back, as a row written before the edge
checked them (or by hand) would hold: for the poison-row tests of every role."""

from __future__ import annotations

import sqlite3
from typing import Any

import asyncpg

from jobgate.storage.postgres.store import is_postgres
from jobgate.storage.protocol import Storage
from jobgate.storage.sqlite.store import is_sqlite, register_functions


async def poke(storage: Storage, table: str, row_id: str, **columns: Any) -> None:
    """UPDATE `table` SET columns WHERE id = row_id, through a connection of its own. Values
    are SQL expressions (so a test can write `'infinity'` or a year-11533 time)."""
    sets = ", ".join(f"{name} = {value}" for name, value in columns.items())
    if is_sqlite(storage):
        conn = sqlite3.connect(storage.engine.path)
        register_functions(conn)  # the job triggers call them
        try:
            conn.execute(f"UPDATE {table} SET {sets} WHERE id = ?", (row_id,))
            conn.commit()
        finally:
            conn.close()
        return
    assert is_postgres(storage)
    pg = await asyncpg.connect(storage.engine.dsn)
    try:
        await pg.execute(f"UPDATE {table} SET {sets} WHERE id = $1", row_id)
    finally:
        await pg.close()


def far_future(storage: Storage) -> str:
    """A time in the year 11533 (what a claim computed from `execution_timeout_s = 3e11`
    before claims clamped), as each dialect stores it."""
    return "'11533-01-01T00:00:00Z'::timestamptz" if storage.dialect == "postgres" else "3e11"


def json_text(storage: Storage, text: str) -> str:
    """A JSON column holding `text` (which must be valid JSON on PostgreSQL's jsonb)."""
    quoted = "'" + text.replace("'", "''") + "'"
    return f"{quoted}::jsonb" if storage.dialect == "postgres" else quoted


def poisons(storage: Storage) -> dict[str, dict[str, str]]:
    """Ways a stored job row can hold what no client could send any more, by name: the
    columns to poke for each."""
    found = {
        "deadline_year_11533": {"deadline_at": far_future(storage)},
        "request_not_an_object": {"request": json_text(storage, '"just text"')},
        "metadata_a_list": {"metadata": json_text(storage, "[1, 2]")},
    }
    if storage.dialect == "sqlite":  # jsonb holds only valid JSON
        found["request_not_json"] = {"request": "'{not json'"}
    return found
