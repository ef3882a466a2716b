"""Request and response schemas of the API (validation and /openapi.json)."""
