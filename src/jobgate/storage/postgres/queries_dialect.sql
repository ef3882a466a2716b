-- The pieces through which a shared statement (sql_shared/) reads as PostgreSQL: each one is
-- defined again in sqlite/queries_dialect.sql, in SQLite's words.

-- fragment: now
-- the time a statement runs at: the caller's :now, or the database's clock when it passes none
coalesce(:now::timestamptz, now())
