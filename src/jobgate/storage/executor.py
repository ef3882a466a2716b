"""The seam between shared store code and one SQL dialect: run a named query, convert values.

A store method written once (in `jobgate.storage.store`) names a block of its dialect's
`queries*.sql`, passes its parameters through the dialect's `Codec` and decodes the rows it gets
back; the `Executor` decides which connection runs it (on SQLite: a reader thread, or the
writer thread and its group commit). Each dialect's store sets `self._sql` in `__init__`.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from jobgate.storage.rows import RowDecoder, RowLike
from jobgate.wakeups import ChangeHub

if TYPE_CHECKING:
    from jobgate.storage.transactions import Transactions

Row = RowLike  # one result row, as the decoders read it


class Codec(Protocol):
    """How values travel to and from one dialect."""

    def now(self, now: datetime | None) -> Any:
        """The `:now` parameter (PostgreSQL: the datetime or None, the SQL falls back to the
        database's clock; SQLite: Unix seconds from the store's clock)."""
        ...

    def time(self, value: datetime | None) -> Any: ...

    def json(self, value: Any) -> Any:
        """A JSON parameter (PostgreSQL: the object, the jsonb codec encodes it; SQLite:
        JSON text, or None)."""
        ...

    def flag(self, value: bool | None) -> Any:
        """A boolean parameter (PostgreSQL: the bool; SQLite: 0, 1 or None)."""
        ...

    def time_out(self, value: Any) -> datetime | None:
        """A time column, clamped to what Python holds (see rows.clamp_time); raises
        ValueError for a stored value that is no time at all."""
        ...

    def json_out(self, value: Any) -> Any:
        """A JSON column, decoded tolerantly (see rows.tolerant_json)."""
        ...


class Executor(Protocol):
    """Runs one named query of the dialect's `queries*.sql`; driver errors arrive translated
    (errors.StorageUnavailable for what a retry may cure, errors.StorageError otherwise)."""

    codec: Codec

    async def read(self, query: str, /, **params: Any) -> list[Row]:
        """A SELECT (SQLite: on a reader connection)."""
        ...

    async def read_one(self, query: str, /, **params: Any) -> Row | None: ...

    async def write(self, query: str, /, **params: Any) -> list[Row]:
        """An INSERT/UPDATE/DELETE … RETURNING; committed when it returns (SQLite: on the
        writer thread, in its group commit)."""
        ...

    async def write_one(self, query: str, /, **params: Any) -> Row | None: ...

    async def write_count(self, query: str, /, **params: Any) -> int:
        """A write; the number of rows it affected."""
        ...


class SqlPart:
    """What every shared store module may use from its host store."""

    _sql: Executor
    changes: ChangeHub  # this process's wake-up hub: publish after a committed write
    _decode: RowDecoder  # every record's decoder, over this codec's time_out and json_out
    _tx: Transactions  # the dialect's transactions (storage.transactions): the seam
