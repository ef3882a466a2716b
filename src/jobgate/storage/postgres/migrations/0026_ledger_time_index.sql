-- usage_ledger_by_tenant (tenant_id, created_at) served no statement: the ledger is read by
-- job (its primary key: usage_for_job, retention) and by time across every tenant
-- (usage_tokens_since, usage_by_model_since: `created_at >= :since`, which a tenant-first
-- btree cannot bound, so they read the whole ledger). Yet every billed job wrote an entry into
-- it. A BRIN index on created_at serves the time reads (the ledger is appended in time order)
-- and costs an insert next to nothing: one fewer btree entry per drained job (of 13).
DROP INDEX usage_ledger_by_tenant;
CREATE INDEX usage_ledger_by_time ON usage_ledger USING brin (created_at);
