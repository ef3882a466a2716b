-- No-op on SQLite, kept for the version parity of the two dialects (PostgreSQL's 0090 changes
-- how its day partitions of history are dropped; SQLite has none).

SELECT 1;
