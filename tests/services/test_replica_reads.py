"""ReplicaReads' rules with scripted servers and a fake clock (the real streaming replica is in
tests/http/test_read_replica_postgres.py): a tenant reads from the replica only once it has
replayed a primary position sampled after the tenant's last write, and only while that sample
is at most `max_lag_s` old; a miss or a failure of the replica is answered by the primary, and
a failed replica is left alone for DOWN_S."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pytest

from jobgate import errors
from jobgate.config import Settings
from jobgate.process import runtime
from jobgate.services import replica_reads
from jobgate.services.replica_reads import LaggingStore, Replica, ReplicaReads, WalStore
from jobgate.storage.postgres.store import is_postgres, postgres_store
from jobgate.storage.records import WalPosition
from jobgate.storage.sqlite.store import sqlite_store
from jobgate.testing import FakeClock

pytestmark = pytest.mark.asyncio


class Server:
    """A server's WAL position and its answer to a read (None: a miss), or a failure."""

    def __init__(self, name: str, *, lsn: int = 100, standby: bool = False) -> None:
        self.name = name
        self.lsn = lsn
        self.standby = standby
        self.answer: str | None = name
        self.failure: Exception | None = None
        self.reads = 0

    async def wal_position(self) -> WalPosition:
        if self.failure is not None:
            raise self.failure
        return WalPosition(in_recovery=self.standby, lsn=self.lsn)

    async def read(self) -> str | None:
        self.reads += 1
        if self.failure is not None:
            raise self.failure
        return self.answer

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None


async def _answer(store: LaggingStore) -> str | None:
    return await cast(Server, store).read()


def _routing(clock: FakeClock, max_lag_s: float = 1.0) -> tuple[ReplicaReads, Server, Server]:
    primary, replica = Server("primary"), Server("replica", standby=True)
    reads = ReplicaReads(
        primary=cast(LaggingStore, primary),
        clock=clock,
        replica=cast(Replica, replica),
        primary_wal=cast(WalStore, primary),
        max_lag_s=max_lag_s,
    )
    return reads, primary, replica


async def test_without_a_replica_every_read_is_the_primarys(clock: FakeClock) -> None:
    primary = Server("primary")
    reads = ReplicaReads(primary=cast(LaggingStore, primary), clock=clock)
    reads.wrote("ten_a")
    await reads.sample_once()
    assert await reads.read("ten_a", _answer) == "primary"
    assert await reads.read("ten_b", _answer) == "primary"


async def test_the_replica_answers_once_it_has_replayed_a_sample(clock: FakeClock) -> None:
    reads, _, replica = _routing(clock)
    assert await reads.read("ten_a", _answer) == "primary"  # nothing sampled yet
    await reads.sample_once()  # both at 100: caught up
    assert await reads.read("ten_a", _answer) == "replica"
    assert replica.reads == 1


async def test_a_writer_reads_the_primary_until_the_replica_replays_past_its_write(
    clock: FakeClock,
) -> None:
    reads, primary, replica = _routing(clock)
    await reads.sample_once()
    clock.advance(0.1)
    primary.lsn = 200  # the write
    reads.wrote("ten_a")
    assert await reads.read("ten_a", _answer) == "primary"
    assert await reads.read("ten_b", _answer) == "replica"  # no write of its own
    clock.advance(0.1)
    await reads.sample_once()  # sampled after the write, not replayed yet (replica at 100)
    assert await reads.read("ten_a", _answer) == "primary"
    replica.lsn = 200
    await reads.sample_once()  # replayed past the write
    assert await reads.read("ten_a", _answer) == "replica"


async def test_a_sample_taken_before_the_write_does_not_count_for_it(clock: FakeClock) -> None:
    """The sample that the replica replays must have been asked after the write returned:
    one taken at the same moment or before proves nothing about the write."""
    reads, primary, replica = _routing(clock)
    reads.wrote("ten_a")  # at t, and sampled at t too
    primary.lsn = replica.lsn = 200
    await reads.sample_once()
    assert await reads.read("ten_a", _answer) == "primary"
    clock.advance(0.01)
    await reads.sample_once()
    assert await reads.read("ten_a", _answer) == "replica"


async def test_a_replica_behind_by_more_than_the_bound_is_not_read(clock: FakeClock) -> None:
    reads, primary, replica = _routing(clock, max_lag_s=1.0)
    await reads.sample_once()
    primary.lsn = 300  # the primary moves on; the replica's replay is paused at 100
    clock.advance(0.5)
    await reads.sample_once()
    assert await reads.read("ten_b", _answer) == "replica"  # 0.5 s behind: within the bound
    clock.advance(0.6)
    assert reads.behind_s() == pytest.approx(1.1)
    assert await reads.read("ten_b", _answer) == "primary"  # 1.1 s behind
    replica.lsn = 300
    await reads.sample_once()
    assert await reads.read("ten_b", _answer) == "replica"


async def test_a_miss_on_the_replica_is_asked_of_the_primary(clock: FakeClock) -> None:
    reads, primary, replica = _routing(clock)
    await reads.sample_once()
    replica.answer = None  # not replayed yet
    assert await reads.read("ten_b", _answer) == "primary"
    assert (replica.reads, primary.reads) == (1, 1)


async def test_a_failing_replica_is_answered_by_the_primary_and_left_alone(
    clock: FakeClock,
) -> None:
    reads, _, replica = _routing(clock)
    await reads.sample_once()
    replica.failure = ConnectionRefusedError()
    assert await reads.read("ten_b", _answer) == "primary"
    replica.failure = None  # back, but not read again before DOWN_S has passed
    await reads.sample_once()
    assert await reads.read("ten_b", _answer) == "primary"
    assert replica.reads == 1
    clock.advance(replica_reads.DOWN_S)
    await reads.sample_once()
    assert await reads.read("ten_b", _answer) == "replica"


async def test_a_failed_sample_leaves_the_replica_alone(clock: FakeClock) -> None:
    reads, _, replica = _routing(clock)
    await reads.sample_once()
    replica.failure = TimeoutError()
    await reads.sample_once()
    replica.failure = None
    assert await reads.read("ten_b", _answer) == "primary"
    assert replica.reads == 0


async def test_a_server_that_is_not_a_standby_is_never_read(clock: FakeClock) -> None:
    """A read URL naming a primary (or a promoted replica): its WAL positions are not
    comparable with the primary's, so it answers nothing."""
    reads, _, replica = _routing(clock)
    replica.standby = False
    await reads.sample_once()
    assert await reads.read("ten_b", _answer) == "primary"
    assert replica.reads == 0


async def test_the_runtime_reads_from_a_replica_only_beside_a_postgres_primary(
    tmp_path: Path, clock: FakeClock
) -> None:
    """A store on PostgreSQL gets a replica store on JOBGATE_READ_DATABASE_URL (built, not
    opened); a store on SQLite is refused."""
    settings = Settings(
        database_url="postgresql://u@primary/d", read_database_url="postgresql://u@replica/d"
    )
    primary = postgres_store(settings.database_url)
    reads = runtime.replica_reads(settings, primary, clock)
    assert is_postgres(reads.replica) and reads.replica.engine.dsn == "postgresql://u@replica/d"
    on_sqlite = sqlite_store(str(tmp_path / "jobgate.db"), clock=clock)
    with pytest.raises(errors.ConfigError, match="read replica needs a PostgreSQL"):
        runtime.replica_reads(settings, on_sqlite, clock)
    unset = Settings(database_url=f"sqlite:///{tmp_path / 'jobgate.db'}")
    assert runtime.replica_reads(unset, on_sqlite, clock).replica is None
