"""The test harness: real PostgreSQL clusters, a fault proxy, processes, throwaway databases,
the audit of what happened to jobs, and storage wrappers for race tests (not shipped in the
wheel; `jobgate.testing` keeps the fakes users need)."""
