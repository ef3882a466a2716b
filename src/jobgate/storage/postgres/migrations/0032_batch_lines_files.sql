-- A line's custom_id is kept exactly: as its JSON text (`custom_id_json`), since text and jsonb
-- refuse a NUL, which a custom_id may hold. A batch records the one model its lines name and,
-- once it ends, its lines' summed usage (OpenAI's batch object carries both). A file expires
-- (`expires_at`, created + 30 days for uploads and results from now on; the files already
-- stored keep none) and the retention pass deletes it then. A batch line's job sends no
-- `response.*` webhook (OpenAI sends those for background responses only; the batch sends its
-- `batch.*` event): the row is skipped before it reaches the outbox.
ALTER TABLE batch_items RENAME COLUMN custom_id TO custom_id_json;
UPDATE batch_items SET custom_id_json = to_json(custom_id_json)::text;
ALTER TABLE batches ADD COLUMN model text;
ALTER TABLE batches ADD COLUMN usage jsonb;
ALTER TABLE files ADD COLUMN expires_at timestamptz;
CREATE INDEX files_expiring ON files (expires_at) WHERE expires_at IS NOT NULL;

CREATE FUNCTION jobgate_outbox_skip_batch_lines() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM batch_items WHERE job_id = NEW.job_id) THEN
        RETURN NULL;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER outbox_skip_batch_lines BEFORE INSERT ON outbox FOR EACH ROW
WHEN (NEW.event_type LIKE 'response.%')
EXECUTE FUNCTION jobgate_outbox_skip_batch_lines();
