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

-- name: conversation_item_page_asc
-- Items of a tenant's conversation after the item `after` (None: from the first), oldest
-- first.
SELECT i.conversation_id, i.position, i.id, i.item, i.response_id, i.created_at
  FROM conversation_items AS i
  JOIN conversations AS c ON c.id = i.conversation_id AND c.tenant_id = :tenant_id
 WHERE i.conversation_id = :conversation_id
   AND i.position > coalesce((SELECT a.position FROM conversation_items AS a
                               WHERE a.conversation_id = :conversation_id
                                 AND a.id = :after), 0)
 ORDER BY i.position
 LIMIT :limit

-- name: conversation_item_page_desc
-- Items of a tenant's conversation before the item `after` (None: from the last), newest
-- first.
SELECT i.conversation_id, i.position, i.id, i.item, i.response_id, i.created_at
  FROM conversation_items AS i
  JOIN conversations AS c ON c.id = i.conversation_id AND c.tenant_id = :tenant_id
 WHERE i.conversation_id = :conversation_id
   AND i.position < coalesce((SELECT a.position FROM conversation_items AS a
                               WHERE a.conversation_id = :conversation_id
                                 AND a.id = :after), 9223372036854775807)
 ORDER BY i.position DESC
 LIMIT :limit

-- name: conversation_insert
-- Store a conversation.
INSERT INTO conversations (id, tenant_id, metadata, created_at)
VALUES (:id, :tenant_id, :metadata, {{now}})
RETURNING id, tenant_id, metadata, created_at
