-- No-op on SQLite, kept for the version parity of the two dialects. PostgreSQL's 0024 lets the
-- claim and the batched finish write their own job_events rows (its statement trigger then skips
-- the joins of its transition tables); SQLite's row triggers (0023) read no transition tables.

SELECT 1;
