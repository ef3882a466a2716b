-- Migration 0027 changes PostgreSQL's statement trigger (each tenant of an insert held once);
-- SQLite keeps its foreign key, checked per row by SQLite itself.
SELECT 1;
