-- A batches role's lease on a batch is a fence: each claim draws a new `lease_token`, and every
-- write the role makes for the batch (its status, its cursor, its lines, its result files, the
-- release) names it, so a pass that outlived its lease writes nothing. `failures` counts the
-- passes in a row that failed on the batch: past a few it fails alone, and the others go on.
-- A result file names its batch while it is written (invisible): the batch's end, which makes
-- the new files visible in the same transaction, deletes whatever a dead pass left.
ALTER TABLE batches ADD COLUMN lease_token text;
ALTER TABLE batches ADD COLUMN failures integer NOT NULL DEFAULT 0;
ALTER TABLE files ADD COLUMN batch_id text;
CREATE INDEX files_batch ON files (batch_id) WHERE batch_id IS NOT NULL;
