"""What an OpenAI provider batch says about its part: whether it has ended and how, its request
counts, and its lines mapped back to the caller's, in the part's order, each once: a line in
the output file succeeded, one in the error file failed, and one in neither (the batch failed,
expired or was cancelled before it ran) gets an error line saying so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from jobgate.wire import openai_batches as batches
from jobgate.wire.openai_batches import RequestCounts

LIVE = frozenset({"validating", "in_progress", "finalizing", "cancelling"})
ENDED = frozenset({"completed", "expired", "cancelled", "failed"})
_NOT_RUN = {
    "expired": batches.NOT_RUN["expired"],
    "cancelled": batches.NOT_RUN["cancelled"],
    "failed": ("batch_failed", "The provider batch failed before this request ran."),
    "completed": ("batch_line_missing", "The provider returned no result for this request."),
}


@dataclasses.dataclass(frozen=True, slots=True)
class PartState:
    status: str  # the provider batch's status
    counts: RequestCounts
    output_file_id: str | None
    error_file_id: str | None

    @property
    def ended(self) -> bool:
        return self.status in ENDED


@dataclasses.dataclass(frozen=True, slots=True)
class LineResult:
    custom_id: str
    line: dict[str, Any]  # the output or error file's line, as the caller reads it
    succeeded: bool


def part_state(batch: Mapping[str, Any]) -> PartState:
    """An OpenAI `batch` object read; a status outside the published ones raises ValueError
    (the caller treats the answer as bad and asks again)."""
    status = batch.get("status")
    if status not in LIVE | ENDED:
        raise ValueError(f"unknown provider batch status {status!r}")
    raw = batch.get("request_counts") or {}
    counts = RequestCounts(
        total=_count(raw, "total"), completed=_count(raw, "completed"), failed=_count(raw, "failed")
    )
    return PartState(
        status=str(status),
        counts=counts,
        output_file_id=_text(batch.get("output_file_id")),
        error_file_id=_text(batch.get("error_file_id")),
    )


def lines_back(
    custom_ids: Sequence[str], *, status: str, output: bytes, errors: bytes
) -> list[LineResult]:
    """The part's lines (`custom_ids`, in its order) as the ended provider batch left them.
    A file line whose custom_id the part does not hold is ignored; one seen twice counts
    once (the first, output before errors)."""
    found: dict[str, LineResult] = {}
    for data, succeeded in ((output, True), (errors, False)):
        for raw in data.splitlines():
            if not raw.strip():
                continue
            try:
                item = orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue
            custom_id = item.get("custom_id") if isinstance(item, dict) else None
            if isinstance(custom_id, str) and custom_id not in found:
                found[custom_id] = LineResult(custom_id, item, succeeded and _ok(item))
    results = []
    code, message = _NOT_RUN.get(status, _NOT_RUN["completed"])
    for index, custom_id in enumerate(custom_ids):
        if custom_id in found:
            results.append(found[custom_id])
            continue
        line = batches.error_line(
            line_id=f"batch_req_missing_{index}", custom_id=custom_id, code=code, message=message
        )
        results.append(LineResult(custom_id, line, False))
    return results


def _ok(item: Mapping[str, Any]) -> bool:
    response = item.get("response")
    return isinstance(response, dict) and response.get("status_code") == 200


def _count(raw: Mapping[str, Any], name: str) -> int:
    value = raw.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
