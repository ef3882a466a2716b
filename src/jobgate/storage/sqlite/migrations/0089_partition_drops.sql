-- No-op on SQLite, kept for the version parity of the two dialects: PostgreSQL's 0089 makes
-- retention drop history by the day; SQLite's retention deletes its rows as before.

SELECT 1;
