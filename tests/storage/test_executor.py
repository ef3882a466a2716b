"""The executor under the shared store code, on both backends: named queries read and write,
writes are committed when they return, values travel through the dialect's codec, and driver
errors arrive translated."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest

from jobgate import errors
from jobgate.storage.executor import Executor, SqlPart
from jobgate.storage.protocol import Storage
from jobgate.storage.sqlite.store import sqlite_store
from jobgate.testing import FakeClock
from tests.storage.helpers import make_tenant, new_job, submit_one


def executor(storage: Storage) -> Executor:
    return cast(SqlPart, storage)._sql


async def test_a_write_returns_its_rows_and_is_read_back_at_once(
    storage: Storage, clock: FakeClock
) -> None:
    sql = executor(storage)
    moment = clock.now() - timedelta(hours=1)
    row = await sql.write_one(
        "tenant_insert", id="ten_x", name="x", webhook_secret="s", now=sql.codec.now(moment)
    )
    assert row is not None and row["id"] == "ten_x"
    assert "webhook_secret" in list(row.keys())
    assert sql.codec.time_out(row["created_at"]) == moment
    again = await sql.read_one("tenant_by_id", id="ten_x")  # another connection sees it
    assert again is not None and again["name"] == "x"
    assert [r["id"] for r in await sql.read("tenant_list")] == ["ten_x"]
    assert await sql.read_one("tenant_by_id", id="ten_missing") is None


async def test_write_one_is_none_and_write_count_zero_when_no_row_matches(
    storage: Storage,
) -> None:
    sql = executor(storage)
    tenant = await make_tenant(storage)
    await storage.api_key_create(
        key_id="key_1", tenant_id=tenant.id, key_hash="h", key_prefix="jg_"
    )
    assert await sql.write_one("api_key_revoke", id="key_missing", now=sql.codec.now(None)) is None
    assert await sql.write("api_key_revoke", id="key_missing", now=sql.codec.now(None)) == []
    assert await sql.write_count("api_key_revoke", id="key_1", now=sql.codec.now(None)) == 1
    assert await sql.write_count("api_key_revoke", id="key_missing", now=sql.codec.now(None)) == 0
    [key] = await storage.api_key_list(tenant_id=tenant.id)
    assert key.revoked_at is not None


async def test_json_and_time_columns_decode_through_the_codec(
    storage: Storage, clock: FakeClock
) -> None:
    sql = executor(storage)
    tenant = await make_tenant(storage)
    request = {"model": "m", "messages": [{"role": "user", "content": "é\u2028"}], "n": 2**62}
    job = await submit_one(storage, job=new_job(tenant, request=request), now=clock.now())
    row = await sql.read_one("job_get", id=job.job.id)
    assert row is not None
    assert sql.codec.json_out(row["request"]) == request
    assert sql.codec.json_out(row["result"]) is None
    assert sql.codec.time_out(row["created_at"]) == clock.now()
    assert sql.codec.time_out(row["completed_at"]) is None


async def test_parameters_travel_through_the_codec(storage: Storage) -> None:
    codec = executor(storage).codec
    moment = datetime(2030, 5, 6, 7, 8, 9, tzinfo=UTC)
    assert codec.time(None) is None and codec.json(None) is None and codec.flag(None) is None
    assert codec.time_out(codec.time(moment)) == moment
    assert codec.json_out(codec.json({"a": [1, None]})) == {"a": [1, None]}
    assert bool(codec.flag(True)) is True and bool(codec.flag(False)) is False


async def test_a_driver_error_arrives_translated(storage: Storage) -> None:
    sql = executor(storage)
    params: dict[str, Any] = {"id": "key_1", "tenant_id": "ten_missing", "key_hash": "h"}
    with pytest.raises(errors.StorageError) as raised:  # a foreign key refuses the row
        await sql.write_one("api_key_insert", **params, key_prefix="jg_", now=sql.codec.now(None))
    assert raised.type is errors.StorageError
    assert raised.value.__cause__ is not None


async def test_a_closed_store_is_unavailable(storage: Storage) -> None:
    sql = executor(storage)
    await storage.close()
    with pytest.raises(errors.StorageUnavailable):
        await sql.read("tenant_list")
    with pytest.raises(errors.StorageUnavailable):
        await sql.write_count("api_key_revoke", id="key_1", now=sql.codec.now(None))
    await storage.open()  # the fixture closes it again
    assert await sql.read("tenant_list") == []


async def test_sqlite_writes_join_the_writers_group_commit(
    tmp_path: Any, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = sqlite_store(str(tmp_path / "g.db"), clock=clock)
    await store.open()
    await store.migrate()
    written: list[str] = []
    real_write = store.engine.database.write

    async def counted(operation: Any) -> Any:
        written.append("write")
        return await real_write(operation)

    monkeypatch.setattr(store.engine.database, "write", counted)
    sql = store._sql
    await sql.write_one(
        "tenant_insert", id="t", name="t", webhook_secret="s", now=sql.codec.now(None)
    )
    await sql.write_count("api_key_revoke", id="k", now=sql.codec.now(None))
    await sql.read("tenant_list")
    assert written == ["write", "write"]
    assert sql.codec.now(None) == clock.now().timestamp()  # the store's clock is SQLite's
    await store.close()
