"""The operator console and dashboard: server-rendered pages over the dashboard's sign-in."""
