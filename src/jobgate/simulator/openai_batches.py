"""The simulated OpenAI Files and Batch API: input files uploaded with purpose `batch`, batches
whose lifecycle is computed from the clock, and the output and error files they leave.

A batch created at t with `latency_s = L` is `validating` until t + L/10, runs its lines one
after another until t + 9L/10 (request_counts grow as they finish), is `finalizing` until
t + L, then `completed`. An input file OpenAI would refuse fails the batch with `errors`; a
batch not done `expires_after_s` after creation (default the 24-hour window) ends `expired`
with the lines that finished in its output file and the rest in its error file (code
`batch_expired`); a cancelled one is `cancelling`, then `cancelled`, the same way. A line whose
body carries `sim` takes its own outcome: `failed` (a 500 in the error file), `rejected` (a 400)
or `never` (it never finishes).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import orjson

from jobgate import errors
from jobgate.simulator import model, wire
from jobgate.wire import openai_batches as batches
from jobgate.wire import openai_requests, sim
from jobgate.wire.sim import Directives

JSONObject = dict[str, Any]
ENDPOINTS = (batches.CHAT, batches.RESPONSES)  # the line urls the simulator can answer
MAX_LINES = 50_000  # OpenAI: requests in one batch
MAX_FILE_BYTES = 200 * 1024 * 1024  # OpenAI: a batch input file's size
WINDOW_S = batches.COMPLETION_WINDOWS["24h"]
CANCEL_GRACE_S = 0.05  # a batch stays `cancelling` this long before it ends
MAX_METADATA_KEYS, MAX_METADATA_KEY, MAX_METADATA_VALUE = 16, 64, 512
LIST_LIMIT = (1, 100, 20)  # a list page's limit: lowest, highest, default


class Refused(Exception):
    """The create (or cancel) is refused with a 400: `message`, naming `param`."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


@dataclasses.dataclass(slots=True)
class _File:
    id: str
    filename: str
    purpose: str
    data: bytes
    created_at: float


@dataclasses.dataclass(slots=True)
class _Line:
    custom_id: str
    url: str
    body: JSONObject
    done_at: float | None  # None: never finishes
    outcome: str  # completed | failed | rejected
    problem: str | None = None  # why a rejected line was refused


@dataclasses.dataclass(slots=True)
class _Batch:
    id: str
    request: JSONObject  # endpoint, input_file_id, completion_window, metadata
    created_at: float
    validated_at: float
    ends_at: float  # when finalizing ends, had every line finished
    expires_at: float
    lines: list[_Line]
    line_errors: list[JSONObject]  # the input file's refusal: the batch fails
    output_file_id: str
    error_file_id: str
    cancel_at: float | None = None

    def last_done(self) -> float | None:
        done = [line.done_at for line in self.lines]
        if any(d is None for d in done):
            return None
        return max((d for d in done if d is not None), default=self.validated_at)

    def status(self, now: float) -> tuple[str, float | None]:
        """The status at `now` and the time the batch entered it (None: not ended)."""
        if now < self.validated_at:
            return "validating", None
        if self.line_errors:
            return "failed", self.validated_at
        ended = self._natural_end()
        if self.cancel_at is not None and (ended is None or ended[1] > self.cancel_at):
            done_at = self.cancel_at + CANCEL_GRACE_S
            return ("cancelled", done_at) if now >= done_at else ("cancelling", None)
        if ended is not None and now >= ended[1]:
            return ended
        last = self.last_done()
        if last is not None and now >= last:
            return "finalizing", None
        return "in_progress", None

    def _natural_end(self) -> tuple[str, float] | None:
        last = self.last_done()
        if last is not None and max(self.ends_at, last) <= self.expires_at:
            return "completed", max(self.ends_at, last)
        return "expired", self.expires_at

    def cut_at(self, now: float) -> float:
        """Lines finished by this time count: now, or the moment a cancel or expiry cut in."""
        status, at = self.status(now)
        if status in ("cancelled", "cancelling") and self.cancel_at is not None:
            return min(now, self.cancel_at)
        if status == "expired" and at is not None:
            return at
        return now


class OpenAIBatches:
    """Files and batches of one simulated OpenAI account, timed by `now` (seconds)."""

    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now
        self._files: dict[str, _File] = {}
        self._batches: dict[str, _Batch] = {}
        self._results: dict[str, tuple[str, str]] = {}  # result file id -> (batch id, kind)

    # -- files -------------------------------------------------------------------------------

    def upload(self, filename: str, purpose: str, data: bytes) -> JSONObject:
        if purpose != "batch":
            raise Refused("the simulator stores files with purpose 'batch' only", "purpose")
        if len(data) > MAX_FILE_BYTES:
            raise Refused(f"a batch input file holds at most {MAX_FILE_BYTES} bytes", "file")
        stored = _File(wire.new_id("file-"), filename, purpose, data, self._now())
        self._files[stored.id] = stored
        return _file_object(stored)

    def file(self, file_id: str) -> JSONObject | None:
        stored = self._files.get(file_id)
        if stored is not None:
            return _file_object(stored)
        content = self.file_content(file_id)
        if content is None:
            return None
        batch_id, kind = self._results[file_id]
        _, ended_at = self._batches[batch_id].status(self._now())
        name = f"{batch_id}_{kind}.jsonl"
        return _file_object(_File(file_id, name, "batch_output", content, ended_at or 0.0))

    def file_content(self, file_id: str) -> bytes | None:
        """An input file's bytes, or an ended batch's output or error file (None: no such
        file, or not written yet)."""
        stored = self._files.get(file_id)
        if stored is not None:
            return stored.data
        owner = self._results.get(file_id)
        if owner is None:
            return None
        batch = self._batches[owner[0]]
        if self._ended_at(batch) is None:
            return None
        output, failures = self._result_lines(batch)
        lines = output if owner[1] == "output" else failures
        return b"".join(orjson.dumps(line) + b"\n" for line in lines) if lines else None

    # -- batches -----------------------------------------------------------------------------

    def create(self, body: JSONObject, plan: Directives) -> str:
        """Accept a batch (raises Refused as OpenAI answers 400); returns its id."""
        request = _checked_request(body)
        stored = self._files.get(request["input_file_id"])
        if stored is None or stored.purpose != "batch":
            raise Refused(
                f"no file {request['input_file_id']!r} with purpose 'batch'", "input_file_id"
            )
        now = self._now()
        phase = plan.latency_s / 10
        validation = batches.Validation(endpoint=request["endpoint"], max_lines=MAX_LINES)
        raws = list(batches.chunk_lines(stored.data, 1))
        for line_number, raw in raws:
            validation.check(raw, line_number)
        refusal = [error.view() for error in validation.finish()]
        lines = [] if refusal else _lines(raws, now + phase, plan.latency_s * 0.8)
        expires_after = WINDOW_S if plan.expires_after_s is None else plan.expires_after_s
        batch = _Batch(
            id=wire.new_id("batch_"),
            request=request,
            created_at=now,
            validated_at=now + phase,
            ends_at=now + plan.latency_s,
            expires_at=now + expires_after,
            lines=lines,
            line_errors=refusal,
            output_file_id=wire.new_id("file-"),
            error_file_id=wire.new_id("file-"),
        )
        self._batches[batch.id] = batch
        self._results[batch.output_file_id] = (batch.id, "output")
        self._results[batch.error_file_id] = (batch.id, "error")
        return batch.id

    def retrieve(self, batch_id: str, *, as_created: bool = False) -> JSONObject | None:
        batch = self._batches.get(batch_id)
        return None if batch is None else self._view(batch, as_created=as_created)

    def cancel(self, batch_id: str) -> JSONObject | None:
        """Start cancelling a batch not ended (raises Refused for one that has)."""
        batch = self._batches.get(batch_id)
        if batch is None:
            return None
        status, _ = batch.status(self._now())
        if status in ("completed", "failed", "expired", "cancelled"):
            raise Refused(f"Cannot cancel a batch with status '{status}'.")
        if batch.cancel_at is None:
            batch.cancel_at = self._now()
        return self._view(batch)

    def page(self, *, after: str | None, limit: int) -> JSONObject:
        """A page of the list, newest first, after the batch `after` (a cursor)."""
        ordered = list(reversed(self._batches.values()))
        if after is not None:
            ids = [b.id for b in ordered]
            ordered = ordered[ids.index(after) + 1 :] if after in ids else []
        chosen = ordered[:limit]
        data = [self._view(b) for b in chosen]
        return {
            "object": "list",
            "data": data,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
            "has_more": len(ordered) > limit,
        }

    # -- views -------------------------------------------------------------------------------

    def _ended_at(self, batch: _Batch) -> float | None:
        status, at = batch.status(self._now())
        return at if status in ("completed", "expired", "cancelled") else None

    def _view(self, batch: _Batch, *, as_created: bool = False) -> JSONObject:
        now = self._now()
        status, at = ("validating", None) if as_created else batch.status(now)
        cut = batch.cut_at(now)
        done = [line for line in batch.lines if line.done_at is not None and line.done_at <= cut]
        counted = status not in ("validating", "failed")
        completed = sum(1 for line in done if line.outcome == "completed")
        view: JSONObject = {
            "id": batch.id,
            "object": "batch",
            **batch.request,
            "status": status,
            "errors": {"object": "list", "data": batch.line_errors} if status == "failed" else None,
            "output_file_id": None,
            "error_file_id": None,
            "created_at": int(batch.created_at),
            "in_progress_at": _when(counted, batch.validated_at),
            "expires_at": int(batch.expires_at),
            "finalizing_at": None,
            "completed_at": _when(status == "completed", at),
            "failed_at": _when(status == "failed", at),
            "expired_at": _when(status == "expired", at),
            "cancelling_at": _when(batch.cancel_at is not None and not as_created, batch.cancel_at),
            "cancelled_at": _when(status == "cancelled", at),
            "request_counts": {
                "total": len(batch.lines) if counted else 0,
                "completed": completed if counted else 0,
                "failed": len(done) - completed if counted else 0,
            },
        }
        last = batch.last_done()
        if status in ("finalizing", "completed") and last is not None:
            view["finalizing_at"] = int(last)
        if status in ("completed", "expired", "cancelled"):
            output, failures = self._result_lines(batch)
            view["output_file_id"] = batch.output_file_id if output else None
            view["error_file_id"] = batch.error_file_id if failures else None
            view["usage"] = _usage(output)
        return view

    def _result_lines(self, batch: _Batch) -> tuple[list[JSONObject], list[JSONObject]]:
        """An ended batch's output and error files' lines, in input order."""
        cut = batch.cut_at(self._now())
        status, _ = batch.status(self._now())
        output: list[JSONObject] = []
        failures: list[JSONObject] = []
        for index, line in enumerate(batch.lines):
            key = f"{batch.id}_{index}"
            if line.done_at is None or line.done_at > cut:
                code, message = batches.NOT_RUN["expired" if status == "expired" else "cancelled"]
                failures.append(
                    batches.error_line(
                        line_id=f"batch_req_{key}", custom_id=line.custom_id, code=code,
                        message=message,
                    )
                )  # fmt: skip
                continue
            status_code, body = _answer(line, key)
            target = output if status_code == 200 else failures
            target.append(
                batches.output_line(
                    line_id=f"batch_req_{key}", custom_id=line.custom_id, job_id=key,
                    status_code=status_code, body=body,
                )
            )  # fmt: skip
        return output, failures


def _when(condition: bool, at: float | None) -> int | None:
    return int(at) if condition and at is not None else None


def _file_object(stored: _File) -> JSONObject:
    return {
        "id": stored.id,
        "object": "file",
        "bytes": len(stored.data),
        "created_at": int(stored.created_at),
        "filename": stored.filename,
        "purpose": stored.purpose,
        "status": "processed",
        "expires_at": None,
        "status_details": None,
    }


def _checked_request(body: JSONObject) -> JSONObject:
    """The create's members as OpenAI checks them (raises Refused)."""
    input_file_id = body.get("input_file_id")
    if not isinstance(input_file_id, str) or not input_file_id:
        raise Refused("input_file_id: a file id is required", "input_file_id")
    endpoint = body.get("endpoint")
    if endpoint not in ENDPOINTS:
        raise Refused(f"endpoint must be one of {', '.join(ENDPOINTS)}", "endpoint")
    window = body.get("completion_window")
    if window not in batches.COMPLETION_WINDOWS:
        raise Refused("completion_window must be '24h'", "completion_window")
    metadata = body.get("metadata")
    if metadata is not None and not _metadata_ok(metadata):
        raise Refused(
            f"metadata holds at most {MAX_METADATA_KEYS} string pairs (keys at most "
            f"{MAX_METADATA_KEY} characters, values {MAX_METADATA_VALUE})",
            "metadata",
        )
    unknown = set(body) - {"input_file_id", "endpoint", "completion_window", "metadata"}
    if unknown:
        raise Refused(f"Unrecognized request argument supplied: {sorted(unknown)[0]}")
    return {
        "endpoint": endpoint,
        "input_file_id": input_file_id,
        "completion_window": window,
        "metadata": metadata,
    }


def _metadata_ok(metadata: Any) -> bool:
    if not isinstance(metadata, dict) or len(metadata) > MAX_METADATA_KEYS:
        return False
    return all(
        isinstance(k, str) and isinstance(v, str)
        and len(k) <= MAX_METADATA_KEY and len(v) <= MAX_METADATA_VALUE
        for k, v in metadata.items()
    )  # fmt: skip


def _lines(raws: list[tuple[int, bytes]], start: float, span_s: float) -> list[_Line]:
    """The validated lines, each finishing in turn over `span_s` from `start` (a line whose
    body carries its own `sim` takes its own latency and outcome)."""
    lines = []
    for index, (_, raw) in enumerate(raws):
        value = orjson.loads(raw)
        body = dict(value["body"])
        done_at: float | None = start + span_s * (index + 1) / len(raws)
        outcome, problem = "completed", None
        if "sim" in body:
            try:
                own = sim.directives(body)
            except errors.InvalidRequest as exc:
                own, problem = Directives(outcome="rejected"), exc.message
            body.pop("sim")
            done_at = None if own.outcome == "never" else start + own.latency_s
            outcome = {"failed": "failed", "rejected": "rejected"}.get(own.outcome, "completed")
        if outcome == "completed" and value["url"] == batches.CHAT:
            try:
                openai_requests.validate_chat(body)
            except errors.InvalidRequest as exc:
                outcome, problem = "rejected", exc.message
        lines.append(_Line(value["custom_id"], value["url"], body, done_at, outcome, problem))
    return lines


def _answer(line: _Line, key: str) -> tuple[int, JSONObject]:
    """The HTTP answer a finished line got: its status code and body."""
    if line.outcome == "failed":
        return 500, wire.openai_error("server_error", "the simulated model failed")
    if line.outcome == "rejected":
        problem = line.problem or "the simulated request is invalid"
        return 400, wire.openai_error("invalid_request", problem)
    assert line.done_at is not None
    if line.url == batches.RESPONSES:
        return 200, wire.response_object(
            line.body,
            response_id=f"resp_{key}",
            created_at=line.done_at,
            status="completed",
            completed_at=line.done_at,
        )
    completion = model.chat_completion(line.body, created=int(line.done_at))
    return 200, {**completion, "id": f"chatcmpl-{key}"}


def _usage(output: list[JSONObject]) -> JSONObject:
    """The batch's usage: its succeeded lines' summed (chat's and responses' names)."""
    input_tokens = output_tokens = 0
    for line in output:
        usage = line["response"]["body"].get("usage") or {}
        input_tokens += int(usage.get("prompt_tokens", usage.get("input_tokens", 0)))
        output_tokens += int(usage.get("completion_tokens", usage.get("output_tokens", 0)))
    return batches.usage_view(input_tokens, output_tokens, 0)
