-- No-op on SQLite, kept for the version parity of the two dialects: PostgreSQL's 0088
-- partitions the history tables by day; SQLite's stay single tables in one file, and retention
-- deletes their rows as before.

SELECT 1;
