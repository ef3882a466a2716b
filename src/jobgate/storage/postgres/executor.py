"""PostgreSQL's executor and codec: a pool of asyncpg connections, driver errors translated.

Times and JSON are converted by the connections' type codecs (registered when a connection
opens), so the codec passes values through as they are; `now` of None lets the SQL fall back
to the database's clock (`coalesce(:now::timestamptz, now())`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import asyncpg
import orjson
from asyncpg.pool import PoolConnectionProxy

from jobgate import errors
from jobgate.storage import sql, text_escape
from jobgate.storage.executor import Codec, Row
from jobgate.storage.rows import EARLIEST, LATEST, tolerant_json

Q = sql.load("jobgate.storage.postgres")
T = TypeVar("T")
Conn = asyncpg.Connection | PoolConnectionProxy

_UNAVAILABLE = (
    asyncpg.PostgresConnectionError,
    asyncpg.CannotConnectNowError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.CrashShutdownError,
    asyncpg.exceptions.TooManyConnectionsError,
    asyncpg.exceptions.LockNotAvailableError,
    asyncpg.exceptions.QueryCanceledError,
    OSError,
    TimeoutError,
)


def translate(exc: BaseException) -> errors.StorageError:
    if isinstance(exc, _UNAVAILABLE):
        return errors.StorageUnavailable(f"postgres: {type(exc).__name__}: {exc}")
    return errors.StorageError(f"postgres: {type(exc).__name__}: {exc}")


class PostgresCodec:
    """Everything passes through: the connection's type codecs convert (see _init_connection)."""

    def now(self, now: datetime | None) -> datetime | None:
        return now

    def time(self, value: datetime | None) -> datetime | None:
        return value

    def json(self, value: Any) -> Any:
        return value

    def flag(self, value: bool | None) -> bool | None:
        return value

    def time_out(self, value: Any) -> datetime | None:
        moment: datetime | None = value  # already clamped by _time_decode
        return moment

    def json_out(self, value: Any) -> Any:
        return value  # already decoded by the jsonb codec, tolerantly


_PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)  # timestamptz counts microseconds from here
_MICROSECOND = timedelta(microseconds=1)
_LATEST_US = (LATEST - _PG_EPOCH) // _MICROSECOND
_EARLIEST_US = (EARLIEST - _PG_EPOCH) // _MICROSECOND


# The times decoded last, by their stored microseconds: the rows of one claim share their
# claim's times (updated_at, started_at, lease_expires_at) and often their submit batch's
# (created_at, run_at), so most of a claimed job's times are a lookup, not a datetime built
# (building them is a visible share of the worker's CPU in a drain). Datetimes are immutable:
# shared freely.
_RECENT_TIMES: dict[int, datetime] = {}
_RECENT_TIMES_MAX = 256


def _time_decode(value: tuple[int]) -> datetime:
    """A stored time, clamped (PostgreSQL holds years to 294276 and infinity; Python stops at
    9999): a row's time never makes a read raise."""
    (us,) = value
    moment = _RECENT_TIMES.get(us)
    if moment is not None:
        return moment
    if us >= _LATEST_US:
        return LATEST
    if us <= _EARLIEST_US:
        return EARLIEST
    moment = _PG_EPOCH + timedelta(microseconds=us)
    if len(_RECENT_TIMES) >= _RECENT_TIMES_MAX:
        _RECENT_TIMES.clear()
    _RECENT_TIMES[us] = moment
    return moment


def _time_encode(value: datetime) -> tuple[int]:
    return ((value.astimezone(UTC) - _PG_EPOCH) // _MICROSECOND,)


def _json_encode(value: Any) -> str:
    encoded = text_escape.json_dumps(value)
    if text_escape.json_needs_escape(encoded):  # jsonb refuses U+0000 (a model's output)
        encoded = text_escape.json_dumps(text_escape.escape_json(value))
    return encoded.decode()


def _json_loads(raw: str) -> Any:
    value = orjson.loads(raw)
    return text_escape.unescape_json(value) if text_escape.ESC in raw else value


_json_decode = tolerant_json(_json_loads)


async def _init_connection(conn: asyncpg.Connection) -> None:
    for name in ("jsonb", "json"):
        await conn.set_type_codec(
            name, encoder=_json_encode, decoder=_json_decode, schema="pg_catalog"
        )
    await conn.set_type_codec(
        "timestamptz",
        encoder=_time_encode,
        decoder=_time_decode,
        schema="pg_catalog",
        format="tuple",
    )


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Pool release without asyncpg's reset query (advisory unlock, CLOSE ALL, UNLISTEN,
    RESET ALL): one round trip per storage call saved. Safe because pooled connections carry
    no session state: every lock taken is transaction-scoped, LISTEN lives on its own
    connection, and nothing SETs a session variable. (asyncpg still rolls back a transaction
    left open.) Keep it that way, or drop this: a transaction-mode pooler (PgBouncer) relies on
    it too, since it lends each transaction a different server session."""


def _pooler_refusal(exc: BaseException) -> bool:
    """A transaction-mode pooler refuses the session settings of a connection's start-up (a
    PostgreSQL server takes them)."""
    return isinstance(exc, asyncpg.ProtocolViolationError) and "startup parameter" in str(exc)


def _affected(status: str) -> int:
    """Rows affected, from a command status such as `UPDATE 3` or `INSERT 0 1`."""
    count = status.rpartition(" ")[2]
    return int(count) if count.isdigit() else 0


# A connection `run` keeps after its call, for the next one (see PostgresExecutor), goes back to
# the pool once unused this long (the pool closes it after its own idle time, as before; looked
# for every KEEP_IDLE_S) or used this many times (so asyncpg's query cap still recycles it).
KEEP_IDLE_S = 30.0
KEEP_USES = 1000
_now = time.monotonic  # the kept connections' clock (tests move it)


async def _release_all(
    pool: asyncpg.Pool, conns: list[PoolConnectionProxy], timeout_s: float | None = None
) -> None:
    for conn in conns:
        with contextlib.suppress(Exception):  # a failed release terminates the connection
            await pool.release(conn, timeout=timeout_s)


async def _release_all_and_close(
    pool: asyncpg.Pool, kept: list[tuple[PoolConnectionProxy, float, int]]
) -> None:
    await _release_all(pool, [conn for conn, _, _ in kept])
    await pool.close()


class PostgresExecutor:
    """The pool, and every statement's way to a connection (`run`).

    A connection given back by a call that ended cleanly (no error, no transaction left open) is
    kept here for the next call rather than released to asyncpg's pool, unless a caller is
    waiting in the pool: asyncpg's acquire and release cost more CPU than a short statement's
    round trip takes in the process (a task and a shield per release, a timer disarmed at each
    acquire and armed at each release, a timeout per acquire). The pool still opens, caps and
    closes the connections, and every wait for one keeps its bound (`acquire_timeout_s`)."""

    def __init__(
        self,
        dsn: str,
        *,
        pool_size: int,
        acquire_timeout_s: float,
        lock_timeout_ms: int,
        idle_in_transaction_ms: int,
        via_pooler: bool = False,
    ) -> None:
        self.codec: Codec = PostgresCodec()
        self._dsn = dsn
        # `dsn` is a transaction-mode pooler (PgBouncer): see _pool_options.
        self.via_pooler = via_pooler
        self._transaction_bounds = Q["transaction_bounds"].sql.format(
            lock_timeout_ms=int(lock_timeout_ms), idle_in_transaction_ms=int(idle_in_transaction_ms)
        )
        self._pool_size = pool_size
        self._acquire_timeout_s = acquire_timeout_s
        self._lock_timeout_ms = lock_timeout_ms
        self._idle_in_transaction_ms = idle_in_transaction_ms
        self._pool: asyncpg.Pool | None = None
        # Connections taken from the pool and idle, the last kept on top: (connection, kept
        # since (_now), calls run on it since it left the pool).
        self._kept: list[tuple[PoolConnectionProxy, float, int]] = []
        self._waiting = 0  # callers waiting in the pool's acquire
        self._trimming: asyncio.TimerHandle | None = None  # the next look for stale ones
        self._releases: set[asyncio.Task[None]] = set()

    async def open(self) -> None:
        if self._pool is not None:
            return
        try:
            self._pool = await asyncpg.create_pool(
                self._dsn,
                min_size=1,
                max_size=self._pool_size,
                init=_init_connection,
                reset=_keep_session,
                command_timeout=60,
                **self._pool_options(),
            )
        except Exception as exc:
            if _pooler_refusal(exc) and not self.via_pooler:
                raise errors.ConfigError(
                    "JOBGATE_DATABASE_URL",
                    f"looks like a transaction-mode pooler ({exc}): set "
                    "JOBGATE_LISTEN_DATABASE_URL to a direct (or session-mode) URL of the same "
                    "database, so that jobgate sends nothing through the pooler that needs a "
                    "session of its own",
                ) from exc
            raise translate(exc) from exc

    def _pool_options(self) -> dict[str, Any]:
        """The connections' session. Direct: the bounds are session settings sent at start-up,
        and asyncpg prepares each statement once per connection (named, cached). Through a
        transaction-mode pooler a connection's server session changes from one transaction to
        the next, so nothing may live in it: statements are unnamed, parsed again at each call
        (asyncpg's statement_cache_size=0, one more round trip per call), and the bounds are
        set anew inside each transaction (`_transaction_bounds`); a statement outside one
        waits on a lock at most command_timeout."""
        if self.via_pooler:
            return {"statement_cache_size": 0, "server_settings": {"application_name": "jobgate"}}
        return {
            "server_settings": {
                "lock_timeout": str(self._lock_timeout_ms),
                # A session idle inside a transaction is a client that is gone (jobgate
                # never waits on anything but the database within one): the server ends
                # it, and gives its locks back, instead of waiting for its TCP keepalive.
                "idle_in_transaction_session_timeout": str(self._idle_in_transaction_ms),
                # Every statement is short, but a bounded walk over a deep queue is estimated
                # at its bound: past jit_above_cost the server compiles it to machine code
                # first, ~0.3-1.5 s for a statement that then runs in milliseconds.
                "jit": "off",
                "application_name": "jobgate",
            }
        }

    async def close(self) -> None:
        if self._trimming is not None:
            self._trimming.cancel()
            self._trimming = None
        if self._pool is not None:
            pool, self._pool = self._pool, None
            kept, self._kept = self._kept, []
            with contextlib.suppress(Exception):
                await asyncio.wait_for(_release_all_and_close(pool, kept), timeout=5)

    async def run(self, work: Callable[[Conn], Awaitable[T]], *, transaction: bool = False) -> T:  # noqa: C901 -- one pooled connection's whole life in one frame, on every storage call
        """`work` on a pooled connection (in a transaction if asked), driver errors translated."""
        pool = self._pool
        if pool is None:
            raise errors.StorageUnavailable("postgres storage is not open")
        bound = self._acquire_timeout_s
        try:
            conn: PoolConnectionProxy | None = None
            uses = 0
            kept = self._kept
            while kept:  # the connection kept last, if it is still open
                candidate, _, uses = kept.pop()
                try:
                    if not candidate.is_closed():
                        conn = candidate
                        break
                except asyncpg.InterfaceError:
                    continue  # lost while kept: asyncpg took its holder back (to reconnect)
                await pool.release(candidate, timeout=bound)  # closed: the pool finishes it
            if conn is None:
                uses = 0
                self._waiting += 1
                try:
                    # An idle connection in the pool is handed out without suspending (its
                    # queue prefers connected holders), so no timeout could fire and none is
                    # set (asyncpg's wait_for: a Timeout armed and cancelled); a wait for a
                    # busy pool or for a connection still to open keeps its bound.
                    conn = await pool.acquire(timeout=None if pool.get_idle_size() else bound)
                finally:
                    self._waiting -= 1
            clean = False
            try:
                if not transaction:
                    result = await work(conn)
                else:
                    async with conn.transaction():
                        if self.via_pooler:
                            await conn.execute(self._transaction_bounds)
                        result = await work(conn)
                clean = True
                return result
            except asyncpg.exceptions.InternalClientError:
                # asyncpg's protocol state is broken (seen when the server terminates a
                # backend mid-statement): never hand this connection out again.
                conn.terminate()
                raise
            finally:
                # Kept only after `work` returned: after an error or a cancellation the pool's
                # release rolls back and waits for a cancelled query. (So a work function must
                # not swallow a query's timeout or cancellation and return: none does.)
                if (
                    clean
                    and not self._waiting
                    and self._pool is pool
                    and uses < KEEP_USES
                    and not conn.is_in_transaction()
                ):
                    self._kept.append((conn, _now(), uses + 1))
                    if self._trimming is None:
                        self._trimming = asyncio.get_running_loop().call_later(
                            KEEP_IDLE_S, self._trim, pool
                        )
                else:
                    await pool.release(conn, timeout=bound)
        except errors.JobgateError:
            raise
        except asyncpg.exceptions.InternalClientError as exc:
            raise errors.StorageUnavailable(f"postgres: {type(exc).__name__}: {exc}") from exc
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError) as exc:
            raise translate(exc) from exc

    def _trim(self, pool: asyncpg.Pool) -> None:
        """Kept connections unused for KEEP_IDLE_S go back to the pool (a timer, armed while
        any is kept)."""
        self._trimming = None
        if self._pool is not pool:
            return
        since = _now() - KEEP_IDLE_S
        stale = [conn for conn, kept_at, _ in self._kept if kept_at <= since]
        if stale:
            self._kept = [entry for entry in self._kept if entry[1] > since]
            task = asyncio.get_running_loop().create_task(
                _release_all(pool, stale, self._acquire_timeout_s)
            )
            self._releases.add(task)
            task.add_done_callback(self._releases.discard)
        if self._kept:
            self._trimming = asyncio.get_running_loop().call_later(KEEP_IDLE_S, self._trim, pool)

    @staticmethod
    async def fetch(conn: Conn, query: str, /, **params: Any) -> list[Row]:
        """One named query on a connection `run` gave (inside a multi-statement transaction)."""
        q = Q[query]
        return list(await conn.fetch(q.positional_sql, *q.args(params)))

    async def read(self, query: str, /, **params: Any) -> list[Row]:
        return await self.run(lambda conn: self.fetch(conn, query, **params))

    async def read_one(self, query: str, /, **params: Any) -> Row | None:
        q = Q[query]
        row: Row | None = await self.run(
            lambda conn: conn.fetchrow(q.positional_sql, *q.args(params))
        )
        return row

    # On PostgreSQL every statement commits on its own: a write is a read that changes rows.
    write = read
    write_one = read_one

    async def write_count(self, query: str, /, **params: Any) -> int:
        q = Q[query]
        status: str = await self.run(lambda conn: conn.execute(q.positional_sql, *q.args(params)))
        return _affected(status)
