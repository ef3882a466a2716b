"""The API's routes, one module per surface: each reads its request, calls a service and answers;
the FastAPI declarations are the source of /openapi.json."""
