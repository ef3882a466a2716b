-- The pieces through which a shared statement (sql_shared/) reads as SQLite: each one is
-- defined again in postgres/queries_dialect.sql, in PostgreSQL's words.

-- fragment: now
-- the time a statement runs at: the caller's :now (the store always passes one, Unix seconds)
:now

-- fragment: since_day
-- The UTC day of :since (a UTC midnight), as the daily rollups key their rows
date(:since, 'unixepoch')

-- fragment: tenant_ids
-- The tenants named in :tenant_ids (a JSON array of ids), as a one-column set
SELECT value FROM json_each(:tenant_ids)

-- fragment: statement_clock
-- The time inside a statement: the caller's :now (SQLite's statements read it where they need it)
:now

-- fragment: retry_at
-- When a verdict `v` that sends its job back to the queue runs it again: v.retry_in_s from now
:now + v.retry_in_s
