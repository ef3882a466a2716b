"""The database URLs jobgate takes (`sqlite:///path`, `postgresql://…`), the one-line reason a
URL is refused, and the form of a URL that still names the same file from another directory."""

from __future__ import annotations

import os
import re

DEFAULT_SQLITE_PATH = "jobgate.db"
DEFAULT_URL = f"sqlite:///./{DEFAULT_SQLITE_PATH}"
POSTGRES_SCHEMES = ("postgresql://", "postgres://")
SQLITE_PREFIX = "sqlite:///"
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")


def problem(url: str) -> str | None:
    """Why `url` names no database jobgate can open, in one line; None when it does."""
    if url.startswith(POSTGRES_SCHEMES):
        return None
    if url.startswith(SQLITE_PREFIX):
        return None if url[len(SQLITE_PREFIX) :].strip("/") else "the SQLite URL names no file"
    scheme = _SCHEME.match(url)
    if scheme is None:
        return f"{url!r} is not a database URL (sqlite:///path or postgresql://…)"
    name = scheme.group(1).lower()
    if name == "sqlite":
        path = url[len("sqlite:") :].lstrip("/") or DEFAULT_SQLITE_PATH
        return (
            "a SQLite URL has three slashes before a relative path (four before an absolute "
            f"one): did you mean '{SQLITE_PREFIX}{path}'?"
        )
    return (
        f"{name} is not supported: jobgate keeps its data in SQLite (sqlite:///path) or "
        "PostgreSQL (postgresql://…)"
    )


def sqlite_path(url: str) -> str | None:
    """The file a `sqlite:///…` URL names (relative to the current directory unless it starts
    with a slash); None for any other URL."""
    if not url.startswith(SQLITE_PREFIX):
        return None
    return url[len(SQLITE_PREFIX) :] or None


def absolute(url: str) -> str:
    """`url` with a relative SQLite path made absolute, so that a command run from another
    directory opens the same file; any other URL unchanged."""
    path = sqlite_path(url)
    if path is None or path.startswith("/") or path == ":memory:":
        return url
    return SQLITE_PREFIX + os.path.abspath(path)
