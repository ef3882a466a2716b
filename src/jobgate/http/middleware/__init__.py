"""The ASGI layers every request passes through: limits on its head and body, the time it may take,
request ids, CORS and the access log."""
