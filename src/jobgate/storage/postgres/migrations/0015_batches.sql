-- OpenAI-compatible files and batches (issue 17). A file's body is stored in chunks of whole
-- lines, so that an upload, an expansion and a download each hold one chunk at a time.

CREATE TABLE files (
    id          text PRIMARY KEY,
    tenant_id   text NOT NULL REFERENCES tenants (id),
    purpose     text NOT NULL,              -- batch | batch_output
    filename    text NOT NULL,
    bytes       bigint NOT NULL DEFAULT 0,
    lines       integer NOT NULL DEFAULT 0,
    status      text NOT NULL,              -- uploading (invisible) | processed
    created_at  timestamptz NOT NULL
);
CREATE INDEX files_tenant ON files (tenant_id, created_at DESC, id DESC);

CREATE TABLE file_chunks (
    file_id     text NOT NULL REFERENCES files (id) ON DELETE CASCADE,
    seq         integer NOT NULL,           -- 0, 1, 2 ...
    first_line  integer NOT NULL,           -- the number (from 1) of the chunk's first line
    line_count  integer NOT NULL,
    data        bytea NOT NULL,             -- whole lines, each ending in \n
    PRIMARY KEY (file_id, seq)
);

CREATE TABLE batches (
    id                text PRIMARY KEY,
    tenant_id         text NOT NULL REFERENCES tenants (id),
    status            text NOT NULL,
    endpoint          text NOT NULL,
    input_file_id     text NOT NULL,
    completion_window text NOT NULL,
    metadata          jsonb,
    priority          integer NOT NULL,
    total             integer NOT NULL,     -- lines of the input file
    expanded_chunks   integer NOT NULL DEFAULT 0,  -- input chunks already turned into jobs
    final_status      text,                 -- completed | expired | cancelled once finalizing
    completed_count   integer,              -- request counts frozen when finalized
    failed_count      integer,
    output_file_id    text,
    error_file_id     text,
    errors            jsonb,
    lease_until       timestamptz,          -- a batches role works on it until then
    created_at        timestamptz NOT NULL,
    expires_at        timestamptz NOT NULL,
    in_progress_at    timestamptz,
    finalizing_at     timestamptz,
    completed_at      timestamptz,
    failed_at         timestamptz,
    expired_at        timestamptz,
    cancelling_at     timestamptz,
    cancelled_at      timestamptz
);
CREATE INDEX batches_tenant ON batches (tenant_id, created_at DESC, id DESC);
CREATE INDEX batches_live ON batches (lease_until)
    WHERE status IN ('validating', 'in_progress', 'finalizing', 'cancelling');

CREATE TABLE batch_items (
    batch_id    text NOT NULL REFERENCES batches (id) ON DELETE CASCADE,
    line        integer NOT NULL,
    custom_id   text NOT NULL,
    job_id      text,                       -- NULL: refused when expanded (see error)
    error       jsonb,
    PRIMARY KEY (batch_id, line)
);
CREATE INDEX batch_items_job ON batch_items (job_id);
