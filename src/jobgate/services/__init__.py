"""Orchestration: the job service behind the API, the worker, the reaper and the runtime."""
