"""What an Anthropic Message Batch says about its part, and how the part's lines are named in it.

Message Batches carry no metadata, and a request's `custom_id` must match
^[a-zA-Z0-9_-]{1,64}$, while a caller's custom_id may be any string of up to 512 characters.
So the caller's ids never travel: the part's i-th line (0-based, in the part's order) is sent
as `request_custom_id(part_key, i)`, the part key's digest and the line's place, and jobgate
keeps the mapping back (the part's lines, in order, are the caller's custom_ids). A results
line is read back only if it carries this part's digest and a place inside the part: a foreign,
repeated or broken line changes nothing, and a line the file lacks is None.

The digest is also how a batch whose create answer was lost is recognised (see
providers.anthropic_batches, `find`): every request of a part's batch carries it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Mapping
from typing import Any

import orjson

from jobgate.wire.openai_batches import RequestCounts

PROCESSING = ("in_progress", "canceling")
ENDED = "ended"
COUNTS = ("processing", "succeeded", "errored", "canceled", "expired")
PREFIX = "jg"
DIGEST_CHARS = 32  # 128 bits of the part key's SHA-256, in hex
CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # what Anthropic takes
MAX_CUSTOM_ID_CHARS = len(PREFIX) + DIGEST_CHARS + 1 + 6  # up to 999,999 lines a part
_OURS = re.compile(rf"^{PREFIX}([0-9a-f]{{{DIGEST_CHARS}}})-(0|[1-9][0-9]{{0,5}})$")


def part_tag(part_key: str) -> str:
    """What every request custom_id of the part starts with."""
    digest = hashlib.sha256(part_key.encode()).hexdigest()[:DIGEST_CHARS]
    return f"{PREFIX}{digest}-"


def request_custom_id(part_key: str, index: int) -> str:
    """The custom_id the part's `index`-th line (from 0) is sent under."""
    if not 0 <= index < 10**6:
        raise ValueError(f"a part holds at most 1,000,000 lines, not line {index}")
    return f"{part_tag(part_key)}{index}"


def line_index(part_key: str, custom_id: str) -> int | None:
    """The place in the part of the line sent as `custom_id`; None for a custom_id this part
    did not send."""
    match = _OURS.match(custom_id)
    if match is None or not custom_id.startswith(part_tag(part_key)):
        return None
    return int(match.group(2))


def carries(part_key: str, custom_id: Any) -> bool:
    """Whether a results line's custom_id was sent by this part."""
    return isinstance(custom_id, str) and line_index(part_key, custom_id) is not None


@dataclasses.dataclass(frozen=True, slots=True)
class PartState:
    processing_status: str  # in_progress | canceling | ended
    counts: RequestCounts  # OpenAI's view: total, succeeded, errored
    raw_counts: Mapping[str, int]  # Anthropic's: processing, succeeded, errored, ...

    @property
    def ended(self) -> bool:
        """Ended: every request succeeded, errored, was canceled or expired; the results
        file is readable."""
        return self.processing_status == ENDED


def part_state(batch: Mapping[str, Any]) -> PartState:
    """A `message_batch` object read; a processing_status outside the published ones raises
    ValueError (the caller treats the answer as bad and asks again). Canceled and expired
    requests count as neither completed nor failed, as OpenAI counts them."""
    status = batch.get("processing_status")
    if status not in (*PROCESSING, ENDED):
        raise ValueError(f"unknown processing_status {status!r}")
    raw = batch.get("request_counts")
    raw = raw if isinstance(raw, Mapping) else {}
    counted = {name: _count(raw, name) for name in COUNTS}
    counts = RequestCounts(
        total=sum(counted.values()), completed=counted["succeeded"], failed=counted["errored"]
    )
    return PartState(str(status), counts, counted)


def requests_total(batch: Mapping[str, Any]) -> int:
    """How many requests a listed batch holds (its counts, whatever its state)."""
    raw = batch.get("request_counts")
    return sum(_count(raw, name) for name in COUNTS) if isinstance(raw, Mapping) else 0


def results_by_line(part_key: str, size: int, data: bytes) -> list[dict[str, Any] | None]:
    """Each of the part's `size` lines' `result` object (`{"type": "succeeded", "message"}`,
    `errored`, `canceled`, `expired`) as the results file holds it, in the part's order; None
    for a line the file lacks. The file's order does not matter (Anthropic keeps none)."""
    found: list[dict[str, Any] | None] = [None] * size
    for raw in data.splitlines():
        if not raw.strip():
            continue
        try:
            item = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(item, dict) or not isinstance(item.get("result"), dict):
            continue
        custom_id = item.get("custom_id")
        index = line_index(part_key, custom_id) if isinstance(custom_id, str) else None
        if index is not None and index < size and found[index] is None:
            found[index] = item["result"]
    return found


def _count(raw: Mapping[str, Any], name: str) -> int:
    value = raw.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0
