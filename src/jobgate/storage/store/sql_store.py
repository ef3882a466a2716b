"""The store written once: the lease holder's entry points (`base.SqlStorageBase`) and every
family of this package, over an executor (the dialect's statements) and a Transactions (the
dialect's transactions, storage.transactions). A dialect's store class adds only what is not a
store method: opening, migrating and watching its database."""

from __future__ import annotations

from jobgate.storage.base import SqlStorageBase
from jobgate.storage.executor import Executor
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
):
    def __init__(self, sql: Executor, transactions: Transactions) -> None:
        self.changes = ChangeHub()
        self._sql = sql
        self._tx = transactions
        self._decode = RowDecoder(time=sql.codec.time_out, json=sql.codec.json_out)
