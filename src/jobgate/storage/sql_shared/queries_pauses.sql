-- Pauses (both dialects): the operator's holds on claims.

-- name: pause_list
-- Every pause, oldest first.
SELECT * FROM pauses ORDER BY created_at, id
