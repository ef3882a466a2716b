-- A redrive gives the job a fresh start deadline as long as its submit's: the start timeout is
-- kept here by the first redrive (before it moves expires_at), since created_at stays put.
-- NULL: never redriven (expires_at - created_at is still the submit's timeout).

ALTER TABLE jobs ADD COLUMN start_timeout_s REAL;
