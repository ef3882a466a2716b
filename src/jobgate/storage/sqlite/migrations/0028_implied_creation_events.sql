-- Migration 0028 makes PostgreSQL imply a job's first event from its row (the view
-- job_event_log); SQLite keeps writing it (the jobs_log_insert trigger): its insert is not
-- what bounds its throughput.
SELECT 1;
