"""The tests' throwaway PostgreSQL databases: a killed run's are dropped by the next template,
never a live run's, nor a database whose name carries no process id."""

from __future__ import annotations

import os
import subprocess
import sys

import asyncpg
import pytest

from tests.support.databases import PostgresTemplate, admin_dsn, orphaned, owner_pid

pytestmark = pytest.mark.postgres


def dead_pid() -> int:
    """The id of a process that has ended (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_name_carries_the_process_that_made_it() -> None:
    assert owner_pid("jobgate_t_4242_0a1b2c3d4e5f") == 4242
    assert owner_pid("jobgate_tmpl_17_abc123") == 17
    assert owner_pid("jobgate_t_0a1b2c3d4e5f") is None  # no process id: never an orphan
    assert owner_pid("jobgate_plans_after") is None
    assert owner_pid("test") is None


def test_only_databases_of_ended_processes_are_orphans() -> None:
    gone = dead_pid()
    names = [
        f"jobgate_t_{gone}_aa",
        f"jobgate_tmpl_{gone}_bb",
        f"jobgate_t_{os.getpid()}_cc",
        f"jobgate_t_{os.getppid()}_dd",
        "jobgate_t_0a1b2c3d4e5f",
        "test",
    ]
    assert orphaned(names) == [f"jobgate_t_{gone}_aa", f"jobgate_tmpl_{gone}_bb"]


async def _databases() -> set[str]:
    conn = await asyncpg.connect(admin_dsn())
    try:
        return {row["datname"] for row in await conn.fetch("SELECT datname FROM pg_database")}
    finally:
        await conn.close()


async def _create(name: str) -> None:
    conn = await asyncpg.connect(admin_dsn())
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()


async def test_a_new_template_drops_a_killed_runs_databases_and_no_others() -> None:
    gone, alive = dead_pid(), os.getppid()
    orphan, template_orphan = f"jobgate_t_{gone}_0123456789ab", f"jobgate_tmpl_{gone}_abcdef"
    living = f"jobgate_t_{alive}_ba9876543210"
    for name in (orphan, template_orphan, living):
        await _create(name)
    template = PostgresTemplate()
    try:
        dropped = await template.drop_orphans()
        left = await _databases()
        assert {orphan, template_orphan} <= set(dropped)
        assert orphan not in left and template_orphan not in left
        assert living in left
    finally:
        conn = await asyncpg.connect(admin_dsn())
        try:
            for name in (orphan, template_orphan, living):
                await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()


async def test_a_templates_clones_carry_its_process_id() -> None:
    template = PostgresTemplate()
    await template.create()
    try:
        dsn = await template.clone()
        assert owner_pid(dsn.rsplit("/", 1)[1]) == os.getpid()
        assert owner_pid(template.name) == os.getpid()
    finally:
        await template.drop()
