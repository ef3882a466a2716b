"""The store written once: the lease holder's entry points (`base.SqlStorageBase`) and every
family of this package, over three parts each dialect implements once: an executor (its
statements, storage.executor), a Transactions (its transactions, storage.transactions) and an
engine (its database's lifecycle, storage.engine). No dialect subclasses it: postgres.store and
sqlite.store assemble one."""

from __future__ import annotations

from datetime import datetime
from typing import Generic, TypeVar

from jobgate.storage.base import SqlStorageBase
from jobgate.storage.engine import Engine
from jobgate.storage.executor import Executor
from jobgate.storage.records import WalPosition
from jobgate.storage.rows import RowDecoder
from jobgate.storage.store.admin import AdminQueries
from jobgate.storage.store.batches import BatchesQueries
from jobgate.storage.store.bulk_actions import BulkActionQueries
from jobgate.storage.store.console import ConsoleQueries
from jobgate.storage.store.conversations import ConversationQueries
from jobgate.storage.store.job_tokens import JobTokenQueries
from jobgate.storage.store.jobs import JobQueries
from jobgate.storage.store.limits import LimitQueries
from jobgate.storage.store.pauses import PauseQueries
from jobgate.storage.store.provider_batches import ProviderBatchQueries
from jobgate.storage.store.providers import ProviderQueries
from jobgate.storage.store.rate_limits import RateLimitQueries
from jobgate.storage.store.retention import RetentionQueries
from jobgate.storage.store.roles import RoleQueries
from jobgate.storage.store.schedules import ScheduleQueries
from jobgate.storage.store.streams import StreamQueries
from jobgate.storage.store.transport import TransportQueries
from jobgate.storage.store.waiting import WaitQueries
from jobgate.storage.store.webhooks import WebhookQueries
from jobgate.storage.transactions import Transactions
from jobgate.wakeups import ChangeHub

EngineT = TypeVar("EngineT", bound=Engine)


class SqlStore(
    SqlStorageBase,
    JobQueries,
    RoleQueries,
    PauseQueries,
    WaitQueries,
    JobTokenQueries,
    LimitQueries,
    RateLimitQueries,
    ScheduleQueries,
    WebhookQueries,
    AdminQueries,
    ProviderQueries,
    BulkActionQueries,
    RetentionQueries,
    StreamQueries,
    BatchesQueries,
    ConsoleQueries,
    TransportQueries,
    ConversationQueries,
    ProviderBatchQueries,
    Generic[EngineT],
):
    """Generic over its engine, so a caller that built one on PostgreSQL reads the engine's
    DSNs typed (postgres.store.PostgresStore)."""

    def __init__(self, sql: Executor, transactions: Transactions, engine: EngineT) -> None:
        self.changes = ChangeHub()
        self.engine = engine
        self.dialect = engine.dialect
        self._sql = sql
        self._tx = transactions
        self._decode = RowDecoder(time=sql.codec.time_out, json=sql.codec.json_out)

    # -- the lifecycle, the engine's ------------------------------------------------------

    async def open(self) -> None:
        await self.engine.open()

    async def close(self) -> None:
        await self.engine.close()

    async def migrate(self) -> list[int]:
        return await self.engine.migrate()

    async def schema_version(self) -> int:
        return await self.engine.schema_version()

    async def listen(self) -> None:
        await self.engine.watch(self.changes)

    async def database_now(self) -> datetime:
        return await self.engine.database_now()

    async def wal_position(self) -> WalPosition:
        return await self.engine.wal_position()
