-- The pieces through which a shared statement (sql_shared/) reads as SQLite: each one is
-- defined again in postgres/queries_dialect.sql, in PostgreSQL's words.

-- fragment: now
-- the time a statement runs at: the caller's :now (the store always passes one, Unix seconds)
:now
