"""Object ids: a prefix and a time-ordered, random 26-character body (ULID layout)."""

from __future__ import annotations

import hashlib
import secrets
from typing import Protocol

from jobgate.clock import Clock

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32, lower case
# Every pair of digits, so that a body is 13 lookups rather than 26 divisions (ids are minted
# per job, thousands per bulk call).
_PAIRS = [high + low for high in _ALPHABET for low in _ALPHABET]
_SHIFTS = tuple(range(120, -1, -10))


def _body(millis: int, random80: int) -> str:
    """26 Crockford digits, most significant first: 10 of the milliseconds (their low 50
    bits), then 16 of the random bits."""
    value = (millis & (2**50 - 1)) << 80 | random80
    return "".join([_PAIRS[(value >> shift) & 1023] for shift in _SHIFTS])


class IdGenerator(Protocol):
    def new(self, prefix: str) -> str: ...


class RandomIds:
    """48 bits of milliseconds then 80 random bits: sortable by creation, unguessable."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock

    def new(self, prefix: str) -> str:
        millis = int(self._clock.now().timestamp() * 1000)
        return f"{prefix}_{_body(millis, secrets.randbits(80))}"


def event_id(job_id: str, event_type: str, series: int) -> str:
    """The stable id of one event of one job: the same on every delivery and every target.

    `series` counts operator redrives, so a redriven job's second failure is a new event.
    The databases compute the same function (jobgate_event_id) when they write the outbox.
    """
    digest = hashlib.sha256(f"{job_id}:{event_type}:{series}".encode()).hexdigest()
    return f"evt_{digest[:24]}"
