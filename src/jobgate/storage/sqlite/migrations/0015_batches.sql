-- OpenAI-compatible files and batches (issue 17). A file's body is stored in chunks of whole
-- lines, so that an upload, an expansion and a download each hold one chunk at a time.

CREATE TABLE files (
    id          TEXT PRIMARY KEY,
    tenant_id   TEXT NOT NULL REFERENCES tenants (id),
    purpose     TEXT NOT NULL,              -- batch | batch_output
    filename    TEXT NOT NULL,
    bytes       INTEGER NOT NULL DEFAULT 0,
    lines       INTEGER NOT NULL DEFAULT 0,
    status      TEXT NOT NULL,              -- uploading (invisible) | processed
    created_at  REAL NOT NULL
);
CREATE INDEX files_tenant ON files (tenant_id, created_at DESC, id DESC);

CREATE TABLE file_chunks (
    file_id     TEXT NOT NULL REFERENCES files (id) ON DELETE CASCADE,
    seq         INTEGER NOT NULL,           -- 0, 1, 2 ...
    first_line  INTEGER NOT NULL,           -- the number (from 1) of the chunk's first line
    line_count  INTEGER NOT NULL,
    data        BLOB NOT NULL,             -- whole lines, each ending in \n
    PRIMARY KEY (file_id, seq)
);

CREATE TABLE batches (
    id                TEXT PRIMARY KEY,
    tenant_id         TEXT NOT NULL REFERENCES tenants (id),
    status            TEXT NOT NULL,
    endpoint          TEXT NOT NULL,
    input_file_id     TEXT NOT NULL,
    completion_window TEXT NOT NULL,
    metadata          TEXT,
    priority          INTEGER NOT NULL,
    total             INTEGER NOT NULL,     -- lines of the input file
    expanded_chunks   INTEGER NOT NULL DEFAULT 0,  -- input chunks already turned into jobs
    final_status      TEXT,                 -- completed | expired | cancelled once finalizing
    completed_count   INTEGER,              -- request counts frozen when finalized
    failed_count      INTEGER,
    output_file_id    TEXT,
    error_file_id     TEXT,
    errors            TEXT,
    lease_until       REAL,          -- a batches role works on it until then
    created_at        REAL NOT NULL,
    expires_at        REAL NOT NULL,
    in_progress_at    REAL,
    finalizing_at     REAL,
    completed_at      REAL,
    failed_at         REAL,
    expired_at        REAL,
    cancelling_at     REAL,
    cancelled_at      REAL
);
CREATE INDEX batches_tenant ON batches (tenant_id, created_at DESC, id DESC);
CREATE INDEX batches_live ON batches (lease_until)
    WHERE status IN ('validating', 'in_progress', 'finalizing', 'cancelling');

CREATE TABLE batch_items (
    batch_id    TEXT NOT NULL REFERENCES batches (id) ON DELETE CASCADE,
    line        INTEGER NOT NULL,
    custom_id   TEXT NOT NULL,
    job_id      TEXT,                       -- NULL: refused when expanded (see error)
    error       TEXT,
    PRIMARY KEY (batch_id, line)
);
CREATE INDEX batch_items_job ON batch_items (job_id);
