"""jobgate: a durable asynchronous job gateway for long-running AI calls."""

__version__ = "0.1.0"
