"""Where the client finds its server and key: arguments, then JOBGATE_URL / JOBGATE_API_KEY,
then the key saved for that server (by `jobgate serve` or `jobgate login`).

The file is `$XDG_CONFIG_HOME/jobgate/credentials.json` (or JOBGATE_CREDENTIALS_PATH): a JSON
object keyed by server (`server_identity`: `http://127.0.0.1:8000` for `localhost:8000`,
`127.0.0.1:8000` and `[::1]:8000` alike, since they are one server), each entry `{"api_key",
"tenant", "operator_key", "database_url"}` (any may be missing), so two local servers never
overwrite each other. It is written whole to a temporary file of mode 0600 and renamed into
place. The format is read here directly, because the client must not import server code.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

DEFAULT_URL = "http://127.0.0.1:8000"
# database_url: where `jobgate serve` keeps its data, for the operator commands (cli/admin.py).
ENTRY_FIELDS = ("api_key", "tenant", "operator_key", "database_url")
# Names of this machine: a server listening on one of them (or on every interface) is reached
# on the loopback address, so they all name the same saved entry.
_THIS_MACHINE = frozenset({"localhost", "127.0.0.1", "::1", "0.0.0.0", "::"})
_DEFAULT_PORTS = {"http": 80, "https": 443}
_TRAILING = re.compile(r"[\s/]+$")


def credentials_path(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    explicit = env.get("JOBGATE_CREDENTIALS_PATH")
    if explicit:
        return Path(explicit)
    base = env.get("XDG_CONFIG_HOME") or os.path.join(Path.home(), ".config")
    return Path(base) / "jobgate" / "credentials.json"


def normal_url(url: str) -> str:
    """`url` without surrounding blanks or trailing slashes."""
    return _TRAILING.sub("", url.strip())


def server_identity(url: str) -> str:
    """The key of a server's saved entry: scheme and host in lower case, this machine's names
    as 127.0.0.1, the port only when it is not the scheme's default, no trailing slash. Text
    that names no server (no scheme or host, blanks in the host) is its own identity."""
    text = normal_url(url)
    if any(c.isspace() for c in text):
        return text  # urlsplit would drop tabs and line breaks; no server's URL has blanks
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        return text
    scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
    if not scheme or not host:
        return text
    if host in _THIS_MACHINE:
        host = "127.0.0.1"
    elif ":" in host:
        host = f"[{host}]"
    if port is not None and port != _DEFAULT_PORTS.get(scheme):
        host = f"{host}:{port}"
    return normal_url(f"{scheme}://{host}{parts.path}")


def load_all(path: Path) -> dict[str, dict[str, str]]:
    """Every saved entry by server identity (entries written under two names of one server
    merge, the later one's fields winning); an unreadable file or a malformed entry reads as
    nothing."""
    try:
        saved: Any = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(saved, dict):
        return {}
    entries: dict[str, dict[str, str]] = {}
    for url, entry in saved.items():
        if isinstance(url, str) and isinstance(entry, dict):
            entries.setdefault(server_identity(url), {}).update(
                (key, value)
                for key, value in entry.items()
                if key in ENTRY_FIELDS and isinstance(value, str)
            )
    return entries


def saved_entry(
    base_url: str, env: Mapping[str, str] | None = None, *, path: Path | None = None
) -> dict[str, str]:
    return load_all(path or credentials_path(env)).get(server_identity(base_url), {})


def saved_key(base_url: str, env: Mapping[str, str] | None = None) -> str | None:
    """The tenant API key saved for `base_url`, if any."""
    return saved_entry(base_url, env).get("api_key") or None


def save(path: Path, url: str, **fields: str | None) -> None:
    """Merge `fields` (api_key, tenant, operator_key, database_url; None leaves one as it is)
    into the entry for `url`'s server, keeping every other server's entry. Mode 0600, in a 0700
    directory if new."""
    unknown = set(fields) - set(ENTRY_FIELDS)
    if unknown:
        raise ValueError(f"unknown credential fields: {sorted(unknown)}")
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    # Two servers starting at once must not lose each other's entry: read, merge and replace
    # under an exclusive lock.
    lock = os.open(path.with_name(f".{path.name}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        saved = load_all(path)
        entry = saved.setdefault(server_identity(url), {})
        entry.update({k: v for k, v in fields.items() if v})
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with open(descriptor, "w") as handle:
            json.dump(saved, handle, indent=2)
            handle.write("\n")
        os.chmod(temporary, 0o600)  # O_CREAT's mode is masked by umask; a stale file keeps its own
        os.replace(temporary, path)
    finally:
        os.close(lock)  # releases the lock


def resolve(
    base_url: str | None, api_key: str | None, env: Mapping[str, str] | None = None
) -> tuple[str, str | None]:
    """(base URL, API key or None) by the documented precedence."""
    env = os.environ if env is None else env
    url = normal_url(base_url or env.get("JOBGATE_URL") or DEFAULT_URL)
    key = api_key or env.get("JOBGATE_API_KEY") or saved_key(url, env)
    return url, key
