-- A line's custom_id is kept exactly: as its JSON text (`custom_id_json`), since SQLite's JSON
-- functions cut a text at a NUL, which a custom_id may hold. A batch records the one model its
-- lines name and, once it ends, its lines' summed usage (OpenAI's batch object carries both).
-- A file expires (`expires_at`, created + 30 days for uploads and results from now on; the
-- files already stored keep none) and the retention pass deletes it then. A batch line's job
-- sends no `response.*` webhook (OpenAI sends those for background responses only; the batch
-- sends its `batch.*` event): the row is skipped before it reaches the outbox.
ALTER TABLE batch_items RENAME COLUMN custom_id TO custom_id_json;
UPDATE batch_items SET custom_id_json = json_quote(custom_id_json);
ALTER TABLE batches ADD COLUMN model TEXT;
ALTER TABLE batches ADD COLUMN usage TEXT;
ALTER TABLE files ADD COLUMN expires_at REAL;
CREATE INDEX files_expiring ON files (expires_at) WHERE expires_at IS NOT NULL;

CREATE TRIGGER outbox_skip_batch_lines BEFORE INSERT ON outbox
WHEN new.event_type LIKE 'response.%'
 AND EXISTS (SELECT 1 FROM batch_items WHERE job_id = new.job_id)
BEGIN
    SELECT RAISE(IGNORE);
END;
