-- Migration 0026 replaces PostgreSQL's usage_ledger_by_tenant with a BRIN on created_at (an
-- index kind SQLite does not have); SQLite's ledger indexes stay as they are.
SELECT 1;
