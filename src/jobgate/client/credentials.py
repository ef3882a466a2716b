"""Where the client finds its server and key: arguments, then JOBGATE_URL / JOBGATE_API_KEY,
then the key `jobgate serve` saved for its default tenant.

`jobgate serve` writes `$XDG_CONFIG_HOME/jobgate/credentials.json` (or JOBGATE_CREDENTIALS_PATH),
a JSON object keyed by server URL (`http://host:port`). The format is read here directly, because
the client must not import server code.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

DEFAULT_URL = "http://127.0.0.1:8000"


def credentials_path(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    explicit = env.get("JOBGATE_CREDENTIALS_PATH")
    if explicit:
        return Path(explicit)
    base = env.get("XDG_CONFIG_HOME") or os.path.join(Path.home(), ".config")
    return Path(base) / "jobgate" / "credentials.json"


def saved_key(base_url: str, env: Mapping[str, str] | None = None) -> str | None:
    """The key `jobgate serve` saved for `base_url`, if any."""
    try:
        saved = json.loads(credentials_path(env).read_text())
    except (OSError, ValueError):
        return None
    entry = saved.get(base_url.rstrip("/")) if isinstance(saved, dict) else None
    key = entry.get("api_key") if isinstance(entry, dict) else None
    return key if isinstance(key, str) and key else None


def resolve(
    base_url: str | None, api_key: str | None, env: Mapping[str, str] | None = None
) -> tuple[str, str | None]:
    """(base URL, API key or None) by the documented precedence."""
    env = os.environ if env is None else env
    url = (base_url or env.get("JOBGATE_URL") or DEFAULT_URL).rstrip("/")
    key = api_key or env.get("JOBGATE_API_KEY") or saved_key(url, env)
    return url, key
