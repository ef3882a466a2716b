"""The HTTP edge: thin routes over the services, RFC 9457 problems, auth."""
