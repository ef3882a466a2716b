-- What the alert gauges read at scrape time (PostgreSQL).

-- name: webhook_endpoints_failing
-- Per tenant: enabled endpoints with a delivery still pending after :min_attempts failures.
SELECT e.tenant_id, count(DISTINCT e.id)::integer AS failing
  FROM outbox AS o
  JOIN webhook_endpoints AS e ON e.id = o.endpoint_id
 WHERE {{delivery_failing}} AND NOT e.disabled
 GROUP BY e.tenant_id
