-- No-op on SQLite, kept for the version parity of the two dialects (PostgreSQL's 0091 changes
-- how its day partitions of history are made; SQLite has none).

SELECT 1;
