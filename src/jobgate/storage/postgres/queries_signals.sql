-- What the alert gauges read at scrape time (PostgreSQL).

-- fragment: delivery_failing
-- Whether outbox row o is a delivery still pending after :min_attempts failed attempts: what
-- makes an endpoint failing, for the alert gauge and the console alike.
(o.state = 'pending' AND o.attempts >= :min_attempts)

-- name: webhook_endpoints_failing
-- Per tenant: enabled endpoints with a delivery still pending after :min_attempts failures.
SELECT e.tenant_id, count(DISTINCT e.id)::integer AS failing
  FROM outbox AS o
  JOIN webhook_endpoints AS e ON e.id = o.endpoint_id
 WHERE {{delivery_failing}} AND NOT e.disabled
 GROUP BY e.tenant_id
