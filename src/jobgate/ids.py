"""Object ids: a prefix and a time-ordered, random 26-character body (ULID layout)."""

from __future__ import annotations

import hashlib
import secrets
from typing import Protocol

from jobgate.clock import Clock

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32, lower case


def _encode(value: int, length: int) -> str:
    chars = []
    for _ in range(length):
        value, digit = divmod(value, 32)
        chars.append(_ALPHABET[digit])
    return "".join(reversed(chars))


class IdGenerator(Protocol):
    def new(self, prefix: str) -> str: ...


class RandomIds:
    """48 bits of milliseconds then 80 random bits: sortable by creation, unguessable."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock

    def new(self, prefix: str) -> str:
        millis = int(self._clock.now().timestamp() * 1000)
        return f"{prefix}_{_encode(millis, 10)}{_encode(secrets.randbits(80), 16)}"


def event_id(job_id: str, event_type: str, series: int) -> str:
    """The stable id of one event of one job: the same on every delivery and every target.

    `series` counts operator redrives, so a redriven job's second failure is a new event.
    The databases compute the same function (jobgate_event_id) when they write the outbox.
    """
    digest = hashlib.sha256(f"{job_id}:{event_type}:{series}".encode()).hexdigest()
    return f"evt_{digest[:24]}"
