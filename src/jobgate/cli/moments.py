"""A moment as the CLI's filters take it: Unix seconds, ISO 8601 with its time zone, or an age
such as `90m` or `2h` (that long before now)."""

from __future__ import annotations

import re
from datetime import datetime

from jobgate import clock

_AGO = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400}


def unix_seconds(name: str, value: str) -> int:
    """Unix seconds of `value`; ValueError with a one-line message naming `name` if it is
    none of the three forms."""
    if value.isdigit():
        return int(value)
    ago = _AGO.match(value)
    if ago:
        now = clock.SystemClock().now().timestamp()
        return int(now - float(ago.group(1)) * _UNIT_S[ago.group(2)])
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"{name} wants unix seconds, ISO 8601 or an age like 2h: {value!r}"
        ) from None
    if moment.tzinfo is None:
        raise ValueError(f"{name} needs a time zone (e.g. 2026-12-01T00:00:00Z)")
    return int(moment.timestamp())
