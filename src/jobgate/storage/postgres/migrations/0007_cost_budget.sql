-- A tenant's daily budget in USD set with `jobgate tenants set --daily-cost-budget-usd` (NULL:
-- the jobgate.toml value or the default applies). Spend is priced from the usage ledger with
-- the providers' configured prices, so the ledger itself keeps tokens only.

ALTER TABLE tenant_limits ADD COLUMN daily_cost_budget_usd double precision;
