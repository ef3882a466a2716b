-- Migration 0041 gives PostgreSQL the pause rule as functions (a status read asks for the
-- covering pause of a queued job only); SQLite's statements include the `pause_covers`
-- fragment and plan its subquery only when it runs it.
SELECT 1;
