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
