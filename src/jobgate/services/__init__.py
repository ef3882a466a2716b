"""Orchestration: the job service behind the API and the roles' loops (worker, reaper,
dispatcher, reconciler, batches); the composition root that wires them is `jobgate.process`."""
