-- Transports (issue 18): which "job ready" message was published for which job. A job is
-- published again when it moved since (a retry, a reclaim, a redrive: its event_seq changed) or
-- when it is still unclaimed at republish_at (the broker lost the message; or its tenant was at
-- its cap). Only written when JOBGATE_TRANSPORT is a broker; the job row stays the truth.
CREATE TABLE transport_publications (
    job_id TEXT PRIMARY KEY REFERENCES jobs (id) ON DELETE CASCADE,
    event_seq INTEGER NOT NULL,
    republish_at REAL NOT NULL,
    published_count INTEGER NOT NULL DEFAULT 1
);
