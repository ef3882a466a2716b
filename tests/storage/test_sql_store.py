"""One concrete SQL store: SqlStore over a dialect's executor, transactions and engine. No class
subclasses it; what differs between PostgreSQL and SQLite beyond statements is the engine's."""

from __future__ import annotations

import ast
import asyncio
import pathlib

import pytest

from jobgate import errors
from jobgate.storage.postgres.store import is_postgres
from jobgate.storage.protocol import Storage
from jobgate.storage.sqlite.store import is_sqlite
from jobgate.storage.store.sql_store import SqlStore

SRC = pathlib.Path(__file__).resolve().parents[2] / "src"
WATCH_TASKS = {"jobgate-listen", "jobgate-sqlite-watch"}


def subclasses_of_sql_store(source: str) -> list[str]:
    """The classes `source` defines on SqlStore (by name, or as `module.SqlStore`)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            for base in node.bases:
                target = base.value if isinstance(base, ast.Subscript) else base
                name = target.attr if isinstance(target, ast.Attribute) else None
                if isinstance(target, ast.Name):
                    name = target.id
                if name == "SqlStore":
                    found.append(node.name)
    return found


def test_no_class_in_jobgate_subclasses_the_sql_store() -> None:
    subclasses = {
        f"{path.relative_to(SRC)}: {name}"
        for path in SRC.rglob("*.py")
        for name in subclasses_of_sql_store(path.read_text())
    }
    assert subclasses == set()
    assert SqlStore.__subclasses__() == []


def test_a_subclass_is_found_however_it_names_the_store() -> None:
    source = (
        "class A(SqlStore): ...\n"
        "class B(sql_store.SqlStore[PostgresEngine]): ...\n"
        "class C(SqlStorageBase): ...\n"
    )
    assert subclasses_of_sql_store(source) == ["A", "B"]


async def test_each_dialect_builds_the_one_store_and_names_its_dialect(storage: Storage) -> None:
    assert type(storage) is SqlStore
    assert storage.dialect == storage.engine.dialect
    assert is_postgres(storage) == (storage.dialect == "postgres")
    assert is_sqlite(storage) == (storage.dialect == "sqlite")
    assert not is_postgres(object()) and not is_sqlite(object())


async def test_the_wal_position_is_postgres_and_sqlite_refuses_it(storage: Storage) -> None:
    assert isinstance(storage, SqlStore)
    if is_sqlite(storage):
        with pytest.raises(errors.ConfigError, match="read replica needs a PostgreSQL"):
            await storage.wal_position()
        return
    position = await storage.wal_position()
    assert not position.in_recovery
    assert position.lsn is not None and position.lsn > 0


async def test_closing_stops_the_watch_and_closing_again_does_nothing(storage: Storage) -> None:
    await storage.listen()
    await storage.listen()  # idempotent: still one watch
    watching = [task for task in asyncio.all_tasks() if task.get_name() in WATCH_TASKS]
    assert len(watching) == 1
    await storage.close()
    assert watching[0].done()
    await storage.close()
