"""The results of an Anthropic Message Batch read back as the caller's OpenAI batch lines: each
of the part's lines once, in order, its output or error line (wire.anthropic_batches) with the
usage the ledger prices for a succeeded one."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from jobgate.providers.base import Usage, anthropic_usage
from jobgate.wire import anthropic_batch_results as ids
from jobgate.wire import anthropic_batches
from jobgate.wire import openai_batches as batches


@dataclasses.dataclass(frozen=True, slots=True)
class LineResult:
    custom_id: str  # the caller's
    line: dict[str, Any]  # the output or error file's line, as the caller reads it
    succeeded: bool
    usage: Usage | None  # what a succeeded line used (priced at the batch rate)


def lines_back(
    lines: Sequence[Mapping[str, Any]],
    *,
    part_key: str,
    provider_batch_id: str,
    results: bytes,
    created_at: int,
) -> list[LineResult]:
    """The part's `lines` (the caller's, in the part's order) as the ended batch's `results`
    file (JSONL) left them: each once, in order."""
    found = ids.results_by_line(part_key, len(lines), results)
    return [
        line_back(
            line, result, line_id=f"batch_req_{provider_batch_id}_{index}", created_at=created_at
        )
        for index, (line, result) in enumerate(zip(lines, found, strict=True))
    ]


def line_back(
    line: Mapping[str, Any], result: Mapping[str, Any] | None, *, line_id: str, created_at: int
) -> LineResult:
    """One caller's line and the result Anthropic gave it (None: none was given)."""
    custom_id = str(line.get("custom_id"))
    kind = result.get("type") if result is not None else "missing"
    if kind == "succeeded":
        assert result is not None
        message = result.get("message")
        if isinstance(message, dict):
            body = anthropic_batches.answer_body(line, message, created_at)
            output = batches.output_line(
                line_id=line_id,
                custom_id=custom_id,
                job_id=str(message.get("id") or line_id),
                status_code=200,
                body=body,
            )
            return LineResult(custom_id, output, True, anthropic_usage(message.get("usage")))
        kind = "missing"
    if kind == "errored":
        assert result is not None
        status, body = anthropic_batches.error_answer(result.get("error"))
        output = batches.output_line(
            line_id=line_id, custom_id=custom_id, job_id=line_id, status_code=status, body=body
        )
        return LineResult(custom_id, output, False, None)
    code, message_text = anthropic_batches.NOT_RUN.get(
        str(kind), anthropic_batches.NOT_RUN["missing"]
    )
    output = batches.error_line(
        line_id=line_id, custom_id=custom_id, code=code, message=message_text
    )
    return LineResult(custom_id, output, False, None)
