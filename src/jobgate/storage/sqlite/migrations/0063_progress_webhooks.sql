-- Progress webhooks: how often an endpoint that lists `job.progress` hears about one job (at
-- most once per this many seconds; services.webhooks bounds it).
ALTER TABLE webhook_endpoints ADD COLUMN progress_interval_s REAL NOT NULL DEFAULT 5;
