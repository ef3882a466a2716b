-- PostgreSQL's 0026 replaces a ledger index no SQLite statement depends on either; SQLite keeps
-- its indexes as they are.
SELECT 1;
