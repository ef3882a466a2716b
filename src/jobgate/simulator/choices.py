"""A simulated chat completion's `n` choices and `logprobs`, as OpenAI answers them: `n` choices
(indexed from 0, their completion tokens all billed), each with `logprobs.content` holding one
entry per token (`token`, `logprob`, `bytes`, `top_logprobs` of `top_logprobs` alternatives)
when the request asks for `logprobs`. Deterministic, so that the same request answers the
same whole or streamed; a streamed answer cuts its text at token boundaries, each chunk
carrying the logprobs of its own tokens."""

from __future__ import annotations

import math
from typing import Any

from jobgate.simulator import model
from jobgate.wire.content import split_evenly

JSONObject = dict[str, Any]
MAX_N = 128  # OpenAI's bound on `n`
MAX_TOP_LOGPROBS = 20


def count(body: JSONObject) -> int:
    """How many choices the request asks for (`n`, 1 when absent or out of range)."""
    n = body.get("n")
    return n if isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= MAX_N else 1


def wants_logprobs(body: JSONObject) -> bool:
    return body.get("logprobs") is True


def top_count(body: JSONObject) -> int:
    top = body.get("top_logprobs")
    if isinstance(top, int) and not isinstance(top, bool):
        return min(max(top, 0), MAX_TOP_LOGPROBS)
    return 0


def tokens(text: str) -> list[str]:
    """The simulated tokenizer: four characters a token (model.count_tokens agrees)."""
    return [text[start : start + 4] for start in range(0, len(text), 4)]


def token_logprobs(pieces: list[str], top: int, *, offset: int = 0) -> list[JSONObject]:
    """`logprobs.content` entries for `pieces`, the tokens from position `offset` of a text."""
    return [_entry(piece, offset + i, top) for i, piece in enumerate(pieces)]


def _entry(token: str, position: int, top: int) -> JSONObject:
    logprob = -round(0.05 * (position % 7), 4)
    chosen = {"token": token, "logprob": logprob, "bytes": list(token.encode())}
    others = [
        {
            "token": f"{token}~{rank}",
            "logprob": logprob - rank,
            "bytes": list(f"{token}~{rank}".encode()),
        }
        for rank in range(1, top)
    ]
    return {**chosen, "top_logprobs": [chosen, *others] if top else []}


def with_choices(completion: JSONObject, body: JSONObject) -> JSONObject:
    """`completion` (one choice) as the request's `n` choices, with logprobs if asked: choice
    `i` > 0 answers the first's text followed by ` [i]`."""
    n = count(body)
    if n == 1 and not wants_logprobs(body):
        return completion
    first = completion["choices"][0]
    text = first["message"].get("content")
    choices = []
    completion_tokens = 0
    for index in range(n):
        content = text if index == 0 or not isinstance(text, str) else f"{text} [{index}]"
        choice = {**first, "index": index, "message": {**first["message"], "content": content}}
        if wants_logprobs(body):
            choice["logprobs"] = {
                "content": token_logprobs(tokens(content or ""), top_count(body)),
                "refusal": None,
            }
        completion_tokens += model.count_tokens(content or "") if index else 0
        choices.append(choice)
    usage = dict(completion["usage"])
    usage["completion_tokens"] += completion_tokens
    usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    return {**completion, "choices": choices, "usage": usage}


def stream_pieces(choice: JSONObject, chunks: int) -> list[tuple[str, JSONObject | None]]:
    """A choice's text as `chunks` deltas: cut evenly, or, when the choice has logprobs, at
    token boundaries (as few deltas as it has tokens), each with its tokens' logprobs."""
    text = choice["message"].get("content") or ""
    logprobs = choice.get("logprobs")
    if logprobs is None:
        return [(piece, None) for piece in split_evenly(text, chunks)]
    pieces = tokens(text)
    per_chunk = max(1, math.ceil(len(pieces) / max(1, chunks)))
    deltas: list[tuple[str, JSONObject | None]] = []
    for start in range(0, len(pieces), per_chunk):
        group = pieces[start : start + per_chunk]
        entries = logprobs["content"][start : start + len(group)]
        deltas.append(("".join(group), {"content": entries, "refusal": None}))
    return deltas
