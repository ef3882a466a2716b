-- Provider fidelity (issue 23): prompt-cache tokens in the usage ledger and its daily rollup
-- (of input_tokens; priced at the cache prices), and the provider's request id (`x-request-id`
-- / Anthropic `request-id`) of the attempt that finished the job.
ALTER TABLE usage_ledger ADD COLUMN cache_read_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage_ledger ADD COLUMN cache_write_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage_daily ADD COLUMN cache_read_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage_daily ADD COLUMN cache_write_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN provider_request_id TEXT;
