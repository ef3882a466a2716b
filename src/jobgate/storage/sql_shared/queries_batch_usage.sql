-- Provider batches' usage rolled up by retention (both dialects).

-- fragment: usage_daily_batches_add
-- A day's rollup of batch usage (into usage_daily_batches AS d) adds to an earlier pass's.
ON CONFLICT (tenant_id, day, provider, model) DO UPDATE
   SET parts = d.parts + excluded.parts,
       input_tokens = d.input_tokens + excluded.input_tokens,
       output_tokens = d.output_tokens + excluded.output_tokens,
       cache_read_tokens = d.cache_read_tokens + excluded.cache_read_tokens,
       cache_write_tokens = d.cache_write_tokens + excluded.cache_write_tokens
