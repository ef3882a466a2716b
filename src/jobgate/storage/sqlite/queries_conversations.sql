-- Conversations (SQLite): a tenant's ordered items and the turns still to add to them. The one
-- writer runs each append alone, so a position is one past the largest.

-- name: conversation_item_append
-- Add items (a JSON array, each with its `id`) after the last of a tenant's conversation, in
-- their order; an item whose id the conversation has already is left out.
INSERT INTO conversation_items (conversation_id, position, id, item, response_id, created_at)
SELECT c.id,
       (SELECT coalesce(max(i.position), 0) FROM conversation_items AS i
         WHERE i.conversation_id = c.id) + e.key + 1,
       e.value ->> '$.id', e.value, :response_id, :now
  FROM conversations AS c, json_each(:items) AS e
 WHERE c.id = :conversation_id AND c.tenant_id = :tenant_id
ON CONFLICT DO NOTHING
RETURNING conversation_id, position, id, item, response_id, created_at

-- name: conversation_turn_prune
-- Forget the turns older than :grace_s whose response was never stored (a create that
-- failed, or answered an earlier one's replay).
DELETE FROM conversation_turns
 WHERE conversation_id = :conversation_id
   AND created_at < :now - :grace_s
   AND NOT EXISTS (SELECT 1 FROM jobs AS j WHERE j.id = conversation_turns.response_id)
