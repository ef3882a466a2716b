-- Bulk actions by filter (both dialects): pick a chunk in id order, then change it by id, in one

-- name: job_bulk_count
-- How many jobs match the filter and are eligible for the action.
SELECT count(*) AS jobs
  FROM jobs AS j
 WHERE {{job_filter}}
   AND {{bulk_eligible}}
