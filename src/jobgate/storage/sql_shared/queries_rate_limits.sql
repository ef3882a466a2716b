-- Shared rate limit buckets and breakers (both dialects; domain.rate_limits has the rules).

-- name: breaker_close
-- A probe succeeded: the provider's breaker is closed for every process.
DELETE FROM provider_breakers WHERE provider = :provider
