"""Open the storage a database URL names."""

from __future__ import annotations

from jobgate import errors
from jobgate.clock import Clock
from jobgate.storage.protocol import Storage


def storage_for_url(
    url: str, *, clock: Clock | None = None, pool_size: int = 10, listen_url: str | None = None
) -> Storage:
    """`sqlite:///path` or `postgresql://…` (also `postgres://…`); `listen_url`: PostgreSQL's
    LISTEN connection when `url` is a transaction-mode pooler (postgres.store.postgres_store)."""
    if url.startswith("sqlite:"):
        from jobgate.storage.sqlite import store as sqlite

        return sqlite.sqlite_store_for_url(url, clock=clock)
    if url.startswith(("postgresql://", "postgres://")):
        from jobgate.storage.postgres import store as postgres

        return postgres.postgres_store(url, pool_size=pool_size, listen_dsn=listen_url)
    raise errors.ConfigError(
        "JOBGATE_DATABASE_URL", f"unsupported database URL {url!r} (sqlite:/// or postgresql://)"
    )
