"""The range of every value a client may send, in one place: JSON shape limits and the bounds
of each numeric field. The HTTP models, the strict JSON parse and the submit checks all read
these; docs/reliability.md ("Limits") lists them.

A value that parses is not a value that fits: a number past these bounds would overflow a
datetime, a 64-bit column or a sleep, so it is refused at the edge with 400 naming the field.
"""

from __future__ import annotations

from typing import Any

from jobgate import errors
from jobgate.wire import sim

# -- JSON bodies ------------------------------------------------------------------------------
MAX_JSON_DEPTH = 64  # objects and arrays nested deeper are refused (orjson stops at 1024)
INT_MIN = -(2**63)  # every JSON number lies within a signed 64-bit integer's range
INT_MAX = 2**63 - 1
_FLOAT_LIMIT = 2.0**63  # float(INT_MAX) rounds up to 2**63, so floats are compared with <
MAX_KEY_CHARS = 1024  # an object member's name

# -- job submission (POST /v1/jobs; /v1/responses shares the timeouts) ---------------------------
PRIORITY_MIN, PRIORITY_MAX = 0, 9
MAX_ATTEMPTS_MAX = 20
MAX_TIMEOUT_S = 7 * 86_400.0  # start_timeout_s and execution_timeout_s: at most 7 days
MIN_TIMEOUT_S = 0.001  # and at least 1 ms (0 or less is refused)
MIN_STALL_TIMEOUT_S = 1.0  # stall_timeout_s: a stream may pause a second between events
MAX_STALL_TIMEOUT_S = 86_400.0
MAX_METADATA_ITEMS = 64
MAX_OUTPUT_TOKENS = 2**31 - 1  # /v1/responses `max_output_tokens` (usage columns are 32-bit)
MAX_TOOL_CALLS = 1_000
# Scheduling (`run_at` Unix seconds, `delay_s`) and concurrency keys.
MAX_DELAY_S = 366 * 86_400.0  # a delay of at most a year (and a day)
RUN_AT_MAX = 253_402_300_799  # 9999-12-31T23:59:59Z, the last second a datetime holds
MAX_CONCURRENCY_KEY_CHARS = 255

# -- long polls, pages and cursors ------------------------------------------------------------
MAX_WAIT_S = 60.0  # `?wait=` and `Prefer: wait=`
MAX_PAGE = 100  # `limit` of list routes (events: MAX_EVENT_PAGE)
MAX_EVENT_PAGE = 1000
MAX_SEQ = 2**31 - 1  # event sequence numbers are 32-bit integers in the databases
MAX_CURSOR_CHARS = 255  # `after` cursors are ids
# `queue_position` walks at most this many entries of the tenant's line back from the job, so
# that a status read costs the same behind any backlog: a job with fewer ahead reads its exact
# place, one farther back reads a floor (`queue_position_exact: false`; 101 for a line of
# claimable jobs). 100 entries walked cost ~0.1 ms of index-only scan on PostgreSQL.
QUEUE_POSITION_COUNTED = 100
# The operator's counts of queued jobs (console overview, /metrics' queued gauge, why jobs wait)
# walk at most this many entries of each tenant's line, from its head in claim order, so that a
# refresh costs the same behind any backlog: a tenant with more reads a floor ("10000+").
QUEUE_COUNTED = 10_000
ID_PATTERN = r"^[A-Za-z0-9_-]{1,255}$"  # object ids in paths and cursors (`job_…`, `we_…`)

# -- simulator directives (`sim` in a provider body) ------------------------------------------
SIM_MAX_LATENCY_S = 3_600.0
SIM_MAX_RETRY_AFTER_S = 3_600.0
SIM_MAX_FAIL_TIMES = 1_000
SIM_MAX_TOOL_CALLS = sim.MAX_TOOL_CALLS


def check_json(value: Any, *, path: str = "") -> None:
    """Raise errors.InvalidRequest naming the first member (dotted path) of a parsed JSON value
    that cannot be stored or compared: nested deeper than MAX_JSON_DEPTH, a number outside the
    signed 64-bit range, a NUL character (PostgreSQL's jsonb refuses it) or an over-long member
    name. Lone surrogates, NaN and Infinity never get this far: the parser refuses them.
    A walk without paths (`_fits`) accepts almost every value; only a value it does not accept
    is walked again by `_check`, which names the member."""
    if not _fits(value, 0):
        _check(value, path, 0)


def _fits(value: Any, depth: int) -> bool:  # noqa: C901 -- a branch per JSON type, one frame: it walks every submitted value
    """Whether `_check` accepts `value` for certain (the same rules, no paths built); False
    for anything unusual (a subclass, another type), which `_check` then decides."""
    kind = type(value)
    if kind is str:
        return "\x00" not in value
    if kind is dict:
        if depth >= MAX_JSON_DEPTH:
            return False
        for key, item in value.items():
            if type(key) is not str or "\x00" in key or len(key) > MAX_KEY_CHARS:
                return False
            if not _fits(item, depth + 1):
                return False
        return True
    if kind is list:
        if depth >= MAX_JSON_DEPTH:
            return False
        for item in value:
            if not _fits(item, depth + 1):
                return False
        return True
    if value is None or kind is bool:
        return True
    if kind is int:
        return bool(INT_MIN <= value <= INT_MAX)
    return kind is float and bool(-_FLOAT_LIMIT < value < _FLOAT_LIMIT)


def _check(value: Any, path: str, depth: int) -> None:
    if isinstance(value, dict):
        if depth >= MAX_JSON_DEPTH:
            _refuse(path, f"nested deeper than {MAX_JSON_DEPTH} levels", "json_too_deep")
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if "\x00" in key or len(key) > MAX_KEY_CHARS:
                _refuse(
                    path or None,
                    f"member names must be at most {MAX_KEY_CHARS} characters, without NUL",
                    "invalid_json_value",
                )
            _check(item, where, depth + 1)
    elif isinstance(value, list):
        if depth >= MAX_JSON_DEPTH:
            _refuse(path, f"nested deeper than {MAX_JSON_DEPTH} levels", "json_too_deep")
        for index, item in enumerate(value):
            _check(item, f"{path}.{index}" if path else str(index), depth + 1)
    else:
        _check_scalar(value, path)


def _check_scalar(value: Any, path: str) -> None:
    if isinstance(value, str):
        if "\x00" in value:
            _refuse(path, "strings must not contain the NUL character", "invalid_json_value")
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int):
        if not INT_MIN <= value <= INT_MAX:
            _refuse(path, "integer outside the signed 64-bit range", "number_out_of_range")
    elif isinstance(value, float) and not -_FLOAT_LIMIT < value < _FLOAT_LIMIT:
        # orjson reads an integer literal beyond 64 bits as a float: refused here as well.
        _refuse(path, "number outside the signed 64-bit range", "number_out_of_range")


def _refuse(path: str | None, problem: str, code: str) -> None:
    message = f"{path}: {problem}" if path else problem
    raise errors.InvalidRequest(message, param=path or None, code=code)


def check_timeout(value: float | None, param: str) -> None:
    """A start or execution timeout that every datetime and column can hold (for callers that
    bypass the HTTP models, such as bulk and batch submits)."""
    if value is not None and not MIN_TIMEOUT_S <= value <= MAX_TIMEOUT_S:
        raise errors.InvalidRequest(
            f"{param} must be between {MIN_TIMEOUT_S} and {MAX_TIMEOUT_S:.0f} seconds",
            param=param,
            code="number_out_of_range",
        )


def check_stall_timeout(value: float | None) -> None:
    if value is not None and not MIN_STALL_TIMEOUT_S <= value <= MAX_STALL_TIMEOUT_S:
        raise errors.InvalidRequest(
            f"stall_timeout_s must be between {MIN_STALL_TIMEOUT_S:g} and "
            f"{MAX_STALL_TIMEOUT_S:.0f} seconds",
            param="stall_timeout_s",
            code="number_out_of_range",
        )


def check_schedule(run_at: float | None, delay_s: float | None) -> None:
    """`run_at` and `delay_s` within range and not both (for callers that bypass the HTTP
    models, such as bulk and batch submits)."""
    if run_at is not None and delay_s is not None:
        raise errors.InvalidRequest(
            "give run_at or delay_s, not both", param="run_at", code="invalid_schedule"
        )
    if run_at is not None and not 0 <= run_at <= RUN_AT_MAX:
        raise errors.InvalidRequest(
            f"run_at must be Unix seconds between 0 and {RUN_AT_MAX}",
            param="run_at",
            code="number_out_of_range",
        )
    if delay_s is not None and not 0 <= delay_s <= MAX_DELAY_S:
        raise errors.InvalidRequest(
            f"delay_s must be between 0 and {MAX_DELAY_S:.0f} seconds",
            param="delay_s",
            code="number_out_of_range",
        )


def check_concurrency_key(key: str | None, param: str = "concurrency_key") -> None:
    """A concurrency key of 1 to MAX_CONCURRENCY_KEY_CHARS printable characters."""
    if key is None:
        return
    if not 1 <= len(key) <= MAX_CONCURRENCY_KEY_CHARS or not key.isprintable():
        raise errors.InvalidRequest(
            f"{param} must be 1-{MAX_CONCURRENCY_KEY_CHARS} printable characters",
            param=param,
            code="invalid_concurrency_key",
        )
