-- One job now owes a shared token bucket at most one minute of tokens (domain.rate_limits.charge).
-- A debt more than a day ahead can only come from an output cap charged unbounded before that
-- (one job could close a provider's tpm for every tenant, for good): it is paid off here.

UPDATE rate_limit_buckets
   SET tokens_at = extract(epoch FROM now())::double precision
 WHERE tokens_at > extract(epoch FROM now())::double precision + 86400;
