-- What the alert gauges read at scrape time (both dialects).

-- fragment: delivery_failing
-- Whether outbox row o is a delivery still pending after :min_attempts failed attempts: what
-- makes an endpoint failing, for the alert gauge and the console alike.
(o.state = 'pending' AND o.attempts >= :min_attempts)
