-- Conversations (OpenAI's Conversations API): a tenant's ordered items, which responses
-- created with `conversation` read as their context and add their turn to once finished.
-- A conversation is kept until deleted (retention deletes jobs, not conversations); its items
-- are copies, so a response deleted or purged later leaves the items it added in place.
CREATE TABLE conversations (
    id         text PRIMARY KEY,
    tenant_id  text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    metadata   jsonb NOT NULL DEFAULT '{}',
    item_count bigint NOT NULL DEFAULT 0,  -- positions handed out so far (appends lock the row)
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX conversations_tenant ON conversations (tenant_id, created_at);

-- One item of a conversation, in `position` order; `response_id` names the response whose
-- turn added it (NULL: added by POST /v1/conversations{,/ID/items}). An item id appears once
-- per conversation: adding a response's turn again adds nothing.
CREATE TABLE conversation_items (
    conversation_id text NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    position        bigint NOT NULL,
    id              text NOT NULL,
    item            jsonb NOT NULL,
    response_id     text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (conversation_id, position),
    UNIQUE (conversation_id, id)
);

-- A response created with `conversation` whose turn is not added yet: added once the
-- response has finished (by the next reader of the conversation), then this row goes.
CREATE TABLE conversation_turns (
    conversation_id text NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    response_id     text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (conversation_id, response_id)
);
