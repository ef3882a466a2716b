-- Conversations (PostgreSQL): a tenant's ordered items and the turns still to add to them. An
-- append takes its positions by raising the conversation's `item_count`, which locks its row
-- until the append commits: appends to one conversation queue behind each other.

-- name: conversation_item_append
-- Add items (a JSON array, each with its `id`) after the last of a tenant's conversation, in
-- their order; an item whose id the conversation has already is left out.
WITH given AS (
    SELECT e.value, e.n FROM jsonb_array_elements(:items::jsonb) WITH ORDINALITY AS e(value, n)
), taken AS (
    UPDATE conversations
       SET item_count = item_count + (SELECT count(*) FROM given)
     WHERE id = :conversation_id AND tenant_id = :tenant_id
    RETURNING id, item_count - (SELECT count(*) FROM given) AS base
)
INSERT INTO conversation_items (conversation_id, position, id, item, response_id, created_at)
SELECT t.id, t.base + g.n, g.value ->> 'id', g.value, :response_id::text,
       coalesce(:now::timestamptz, now())
  FROM taken AS t, given AS g
ON CONFLICT DO NOTHING
RETURNING conversation_id, position, id, item, response_id, created_at

-- name: conversation_turn_prune
-- Forget the turns older than :grace_s whose response was never stored (a create that
-- failed, or answered an earlier one's replay).
DELETE FROM conversation_turns AS t
 WHERE t.conversation_id = :conversation_id
   AND t.created_at < coalesce(:now::timestamptz, now()) - make_interval(secs => :grace_s)
   AND NOT EXISTS (SELECT 1 FROM jobs AS j WHERE j.id = t.response_id)
