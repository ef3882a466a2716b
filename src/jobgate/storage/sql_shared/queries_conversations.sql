-- Conversations (both dialects): a tenant's ordered items and the turns still to add to them.

-- name: conversation_get
-- One conversation of a tenant.
SELECT id, tenant_id, metadata, created_at
  FROM conversations
 WHERE id = :id AND tenant_id = :tenant_id

-- name: conversation_delete
-- Delete a conversation of a tenant, its items and turns with it.
DELETE FROM conversations WHERE id = :id AND tenant_id = :tenant_id RETURNING id

-- name: conversation_turn_list
-- The responses whose turn a conversation has still to take, oldest first.
SELECT response_id FROM conversation_turns
 WHERE conversation_id = :conversation_id
 ORDER BY created_at, response_id

-- name: conversation_turn_delete
-- Forget a turn (taken, or never to be taken).
DELETE FROM conversation_turns
 WHERE conversation_id = :conversation_id AND response_id = :response_id

-- name: conversation_turn_insert
-- Remember a response whose turn the conversation takes once it finishes.
INSERT INTO conversation_turns (conversation_id, response_id, created_at)
VALUES (:conversation_id, :response_id, {{now}})
ON CONFLICT DO NOTHING
