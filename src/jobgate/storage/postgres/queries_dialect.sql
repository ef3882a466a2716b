-- The pieces through which a shared statement (sql_shared/) reads as PostgreSQL: each one is
-- defined again in sqlite/queries_dialect.sql, in SQLite's words.

-- fragment: now
-- the time a statement runs at: the caller's :now, or the database's clock when it passes none
coalesce(:now::timestamptz, now())

-- fragment: since_day
-- The UTC day of :since (a UTC midnight), as the daily rollups key their rows
(:since::timestamptz AT TIME ZONE 'UTC')::date

-- fragment: tenant_ids
-- The tenants named in :tenant_ids (a JSON array of ids), as a one-column set
SELECT jsonb_array_elements_text(:tenant_ids::jsonb)

-- fragment: statement_clock
-- The time inside a statement that reads {{now}} once, as `clock` (a CTE or a subquery)
clock.now

-- fragment: retry_at
-- When a verdict `v` that sends its job back to the queue runs it again: v.retry_in_s from now
{{statement_clock}} + make_interval(secs => v.retry_in_s)
