-- Shared circuit breakers (issue 19): a provider whose breaker some process opened, and until
-- when (Unix seconds, database clock) no process calls it; after that each process may send
-- one probe. A closed breaker has no row.

CREATE TABLE provider_breakers (
    provider   TEXT PRIMARY KEY,
    open_until DOUBLE PRECISION NOT NULL,
    opened_by  TEXT NOT NULL DEFAULT ''
);
