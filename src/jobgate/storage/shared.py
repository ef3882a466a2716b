"""The ledger's cache-token columns of a usage object, for SQLite's finish, which bills in
Python (PostgreSQL's job_finish and both dialects' settle read the same fields in SQL)."""

from __future__ import annotations

from typing import Any


def cache_tokens(usage: dict[str, Any]) -> dict[str, int]:
    """The prompt-cache tokens of a usage object, as the ledger's columns."""
    return {
        "cache_read_tokens": int(usage.get("cache_read_input_tokens") or 0),
        "cache_write_tokens": int(usage.get("cache_creation_input_tokens") or 0),
    }
