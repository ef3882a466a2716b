-- What the operator console reads (both dialects): recent transitions, queue depth, job search.

-- name: console_job_by_provider_job_id
-- Jobs carrying a provider's job id, newest first.
SELECT * FROM jobs WHERE provider_job_id = :provider_job_id
 ORDER BY created_at DESC, id DESC
 LIMIT :limit
