-- Transports: a publication whose job has no message in the broker (the intake consumed it and
-- deferred the job, its tenant at its cap; or the publish failed) is `deferred` until it is
-- published again. The relay's window counts every other publication of a queued job's current
-- transition as a message still in the broker. A constant default adds no rewrite.

ALTER TABLE transport_publications ADD COLUMN deferred boolean NOT NULL DEFAULT false;
