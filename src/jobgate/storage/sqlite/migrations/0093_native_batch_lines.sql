-- Provider-native batches, the lines' side. A line routed to a provider with native batches has
-- no job: it keeps its provider and the body it is sent with, and, once its part ended and was
-- read back, how it ended (`outcome`: succeeded | failed | not_run), its output or error file
-- line (without its custom_id, which custom_id_json holds exactly) and its usage. A part keeps
-- the provider's last status and request counts, and when its lines were read back.
ALTER TABLE batch_items ADD COLUMN provider TEXT;
ALTER TABLE batch_items ADD COLUMN request TEXT;
ALTER TABLE batch_items ADD COLUMN outcome TEXT;
ALTER TABLE batch_items ADD COLUMN result_line TEXT;
ALTER TABLE batch_items ADD COLUMN input_tokens INTEGER;
ALTER TABLE batch_items ADD COLUMN output_tokens INTEGER;
ALTER TABLE batch_items ADD COLUMN cached_tokens INTEGER;
ALTER TABLE provider_batches ADD COLUMN status TEXT;
ALTER TABLE provider_batches ADD COLUMN request_counts TEXT;
ALTER TABLE provider_batches ADD COLUMN collected_at REAL;
