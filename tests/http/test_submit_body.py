"""The one check of a submit body (http.submit_body) answers exactly as SubmitJobRequest: the
same spec for every body the model takes, the same refusal (words, parameter, code) for every
body it refuses, at each bound the model declares and for generated bodies, valid and not."""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson
import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobgate import errors
from jobgate.http import problems, submit_body
from jobgate.http.routes import submit_many as routes
from jobgate.http.schemas.native import SubmitJobRequest
from jobgate.services.jobs import SubmitSpec
from jobgate.services.submit_many import SubmitManyItem

CHAT = "/v1/chat/completions"
BODY = {"model": "sim-echo", "messages": [{"role": "user", "content": "hi"}]}

ITEMS: list[Any] = [
    {"endpoint": CHAT, "body": BODY},
    {"endpoint": CHAT, "body": BODY, "metadata": {"n": 1, "deep": {"a": [1, None]}}},
    {"endpoint": CHAT, "body": BODY, "metadata": {}},
    {"endpoint": CHAT, "body": BODY, "metadata": {f"k{i}": i for i in range(64)}},
    {"endpoint": CHAT, "body": BODY, "metadata": {f"k{i}": i for i in range(65)}},
    {"endpoint": CHAT, "body": BODY, "metadata": None},
    {"endpoint": CHAT, "body": BODY, "metadata": []},
    {"endpoint": CHAT, "body": BODY, "metadata": "x"},
    {"endpoint": "e", "body": BODY},
    {"endpoint": "e" * 200, "body": BODY},
    {"endpoint": "e" * 201, "body": BODY},
    {"endpoint": "", "body": BODY},
    {"endpoint": 7, "body": BODY},
    {"endpoint": None, "body": BODY},
    {"endpoint": ["x"], "body": BODY},
    {"endpoint": "é" * 200, "body": BODY},  # characters, not bytes
    {"body": BODY},
    {"endpoint": CHAT},
    {},
    {"endpoint": CHAT, "body": {}},
    {"endpoint": CHAT, "body": {"model": None}},
    {"endpoint": CHAT, "body": {"model": ""}},
    {"endpoint": CHAT, "body": {"model": "m"}},
    {"endpoint": CHAT, "body": {"model": "m" * 256}},
    {"endpoint": CHAT, "body": {"model": "m" * 257}},
    {"endpoint": CHAT, "body": {"model": 5}},
    {"endpoint": CHAT, "body": {"model": True}},
    {"endpoint": CHAT, "body": {"model": ["sim-echo"]}},
    {"endpoint": CHAT, "body": {"model": "sim-echo", "sim": {"latency_s": 0.1}}},
    {"endpoint": CHAT, "body": {"model": "sim-echo", "sim": {"latency_s": -1}}},
    {"endpoint": CHAT, "body": {"model": "sim-echo", "sim": {"latency_s": 1, "x": [1]}}},
    {"endpoint": CHAT, "body": {"model": "sim-echo", "sim": None}},
    {"endpoint": CHAT, "body": {"model": "sim-echo", "sim": "fast"}},
    {"endpoint": CHAT, "body": {"model": "sim-echo", "stream": True, "x": {"y": 1}}},
    {"endpoint": CHAT, "body": None},
    {"endpoint": CHAT, "body": []},
    {"endpoint": CHAT, "body": "text"},
    {"endpoint": CHAT, "body": BODY, "priority": 1},
    {"endpoint": CHAT, "body": BODY, "priority": 1.0},
    {"endpoint": CHAT, "body": BODY, "priority": True},
    {"endpoint": CHAT, "body": BODY, "unknown": 1},
    {"endpoint": CHAT, "body": BODY, "provider": "sim"},
    {"endpoint": CHAT, "body": BODY, "stream": True},
    {"endpoint": CHAT, "body": BODY, "delay_s": 5, "run_at": 5},
    {"endpoint": CHAT, "body": BODY, "delay_s": 5, "run_at": None},
    {"endpoint": CHAT, "body": BODY, "delay_s": 5, "run_at": -1},
    {"endpoint": CHAT, "body": BODY, "start_timeout_s": 60, "execution_timeout_s": 1e400},
    {"endpoint": CHAT, "body": BODY, "webhook": {"url": "https://h/x"}},
    {"endpoint": CHAT, "body": BODY, "webhook": {"url": "u", "event_types": ["job.failed"]}},
    {"endpoint": CHAT, "body": BODY, "webhook": {"url": "u", "event_types": ["e" * 65]}},
    {"endpoint": CHAT, "body": BODY, "webhook": {"url": "u", "secret": "s"}},
    {"endpoint": CHAT, "body": BODY, "webhook": "https://h/x"},
    {"endpoint": CHAT, "body": BODY, "webhook": None},
    {"endpoint": CHAT, "body": BODY, "on_retry": "continue", "concurrency_key": "user-1"},
    {"endpoint": CHAT, "body": BODY, "on_retry": "again"},
    {"endpoint": CHAT, "body": BODY, "idempotency_key": "k-1"},
    {"endpoint": CHAT, "body": BODY, "idempotency_key": None},
    {"endpoint": CHAT, "body": BODY, "idempotency_key": 5},
    {"endpoint": CHAT, "body": BODY, "idempotency_key": "k", "metadata": {"a": "b"}},
    {"endpoint": 1, "body": BODY, "idempotency_key": "k"},
    "not an object",
    None,
    [],
]


def by_model(fields: dict[str, Any]) -> SubmitSpec:
    """The spec, or the refusal, of SubmitJobRequest itself: what the route made of the model
    before the one check (the body as sent, the other members as the model read them)."""
    try:
        payload = SubmitJobRequest.model_validate(fields)
    except pydantic.ValidationError as exc:
        raise problems.invalid_request_of(exc) from None
    members = {name: getattr(payload, name) for name in SubmitJobRequest.model_fields}
    members["body"] = fields["body"]
    members["webhook"] = None if payload.webhook is None else payload.webhook.model_dump()
    return SubmitSpec(**members, json_checked=True)


def answer(check: Any, fields: Any) -> tuple[Any, ...]:
    """A check's answer, comparable: its spec (types of the values too) or its refusal."""
    try:
        spec = check(fields)
    except errors.JobgateError as exc:
        return ("refused", type(exc), str(exc), exc.code, vars(exc))
    return ("spec", spec, repr(spec))


def _refusal(exc: errors.JobgateError | None) -> tuple[Any, ...] | None:
    return None if exc is None else (type(exc), str(exc), exc.code, vars(exc))


def _by_model_item(index: int, item: Any) -> SubmitManyItem:
    """A bulk item through the model alone."""
    if not isinstance(item, dict):
        return routes._parse_item(index, item)
    fields = dict(item)
    key = fields.pop("idempotency_key", None)
    if key is not None and not isinstance(key, str):
        return routes._parse_item(index, item)
    try:
        return SubmitManyItem(by_model(fields), fields, key)
    except errors.InvalidRequest as exc:
        return SubmitManyItem(None, refused=exc)


@pytest.mark.parametrize("index", range(len(ITEMS)))
def test_every_item_parses_as_the_model_parses_it(index: int) -> None:
    item = ITEMS[index]
    got = routes._parse_item(index, item)
    want = _by_model_item(index, item)
    assert (got.spec, repr(got.spec)) == (want.spec, repr(want.spec))
    assert got.raw_body == want.raw_body
    assert got.idempotency_key == want.idempotency_key
    assert _refusal(got.refused) == _refusal(want.refused)


def test_the_whole_bulk_body_parses_alike() -> None:
    raw = b'{"jobs": [' + b",".join(orjson.dumps(i) for i in ITEMS) + b"]}"
    got = routes.parse_items(raw)
    want = [_by_model_item(i, item) for i, item in enumerate(orjson.loads(raw)["jobs"])]
    assert [(g.spec, _refusal(g.refused)) for g in got] == [
        (w.spec, _refusal(w.refused)) for w in want
    ]


def test_the_body_is_kept_as_sent_and_the_metadata_is_a_new_dict() -> None:
    """The provider body is stored and sent as the client sent it (not the model's reading of
    it); the metadata is a copy, as the model makes."""
    body = {"model": "sim-echo", "sim": {"latency_s": 1}, "x": [1]}
    metadata = {"a": 1}
    spec = submit_body.spec_of({"endpoint": CHAT, "body": body, "metadata": metadata})
    assert spec.body is body and body == {"model": "sim-echo", "sim": {"latency_s": 1}, "x": [1]}
    assert spec.metadata == metadata and spec.metadata is not metadata


def test_a_field_left_out_reads_the_models_default() -> None:
    """The compiled check leaves a missing field to SubmitSpec's default: each must be the
    model's."""
    spec_fields = {f.name: f for f in dataclasses.fields(SubmitSpec)}
    for name, field in SubmitJobRequest.model_fields.items():
        if field.is_required():
            continue
        spec_field = spec_fields[name]
        if field.default_factory is not None:
            assert spec_field.default_factory is field.default_factory, name
        else:
            assert spec_field.default == field.default, name


def test_a_model_it_cannot_compile_fails_at_import() -> None:
    """A rule the compilation does not know (another validator, a union) is refused loudly,
    never skipped."""

    class Other(pydantic.BaseModel):
        a: int | str = 1

        @pydantic.model_validator(mode="after")
        def _one_schedule(self) -> Other:
            return self

    class Renamed(pydantic.BaseModel):
        @pydantic.model_validator(mode="after")
        def _check(self) -> Renamed:
            return self

    with pytest.raises(TypeError, match="cannot compile a 'union'"):
        submit_body._compiled(Other)
    with pytest.raises(TypeError, match="validators changed"):
        submit_body._compiled(Renamed)


_NUMBERS = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(),  # inf and nan too
    st.sampled_from([0, 1, 9, 10, 20, 21, 0.0005, 0.001, 0.5, 1.0, 3600, 3601, 86400, 604800,
                     604800.5, 31622400, 253402300799, 253402300800, -0.0]),
)  # fmt: skip
_JSON = st.recursive(
    st.none() | st.booleans() | _NUMBERS | st.text(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=6,
)


def _text(*bounds: int) -> st.SearchStrategy[str]:
    """Short text, and text at and either side of each bound."""
    lengths = [n for bound in bounds for n in (bound - 1, bound, bound + 1) if n >= 0]
    return st.text(max_size=3) | st.sampled_from(lengths).map(lambda n: "é" * n)


def _either(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly a value of the member's kind, sometimes any JSON value."""
    return st.one_of(strategy, strategy, strategy, _JSON)


_SIM = st.fixed_dictionaries(
    {},
    optional={
        "latency_s": _either(_NUMBERS),
        "fail_with": _either(st.sampled_from(["rate_limit", "hang", "stream_stall", "other"])),
        "fail_times": _either(_NUMBERS),
        "retry_after_s": _either(_NUMBERS),
        "outcome": _either(st.sampled_from(["completed", "never", "other"])),
        "webhooks": _either(st.sampled_from(["send", "early", "other"])),
        "cancel": _either(st.sampled_from(["supported", "unsupported", "other"])),
        "cut_at": _either(_NUMBERS),
        "tool_calls": _either(_NUMBERS),
        "other": _JSON,
    },
)
_BODY = st.fixed_dictionaries(
    {},
    optional={
        "model": _either(_text(1, 256) | st.none()),
        "sim": _either(_SIM | st.none()),
        "messages": _JSON,
        "stream": _JSON,
    },
)
_WEBHOOK = st.fixed_dictionaries(
    {"url": _either(_text(2048))},
    optional={
        "event_types": _either(st.lists(_either(_text(64)), max_size=17)),
        "secret": _JSON,
    },
)
_FIELDS = {
    "endpoint": _either(_text(1, 200)),
    "body": _either(_BODY),
    "provider": _either(_text(100) | st.none()),
    "metadata": _either(st.dictionaries(st.text(max_size=3), _JSON, max_size=3)),
    "webhook": _either(_WEBHOOK | st.none()),
    "priority": _either(_NUMBERS | st.none()),
    "max_attempts": _either(_NUMBERS | st.none()),
    "start_timeout_s": _either(_NUMBERS | st.none()),
    "execution_timeout_s": _either(_NUMBERS | st.none()),
    "stream": _either(st.booleans()),
    "stall_timeout_s": _either(_NUMBERS | st.none()),
    "on_retry": _either(st.sampled_from(["continue", "restart", "other"]) | st.none()),
    "run_at": _either(_NUMBERS | st.none()),
    "delay_s": _either(_NUMBERS | st.none()),
    "concurrency_key": _either(_text(1, 255) | st.none()),
    "unknown": _JSON,
}
_USUAL = st.fixed_dictionaries(
    {"endpoint": _text(1, 200), "body": _BODY},
    optional={"metadata": st.dictionaries(st.text(max_size=3), _JSON, max_size=3)},
)
BODIES = st.one_of(
    st.fixed_dictionaries({}, optional=_FIELDS),
    st.fixed_dictionaries({"endpoint": _FIELDS["endpoint"], "body": _FIELDS["body"]}, optional={
        name: strategy for name, strategy in _FIELDS.items() if name not in ("endpoint", "body")
    }),
    _USUAL,
)  # fmt: skip


@settings(max_examples=1500, deadline=None)
@given(fields=BODIES)
def test_generated_bodies_are_answered_as_the_model_answers_them(fields: dict[str, Any]) -> None:
    assert answer(submit_body.spec_of, fields) == answer(by_model, fields)


_TAKEN = st.fixed_dictionaries(
    {
        "endpoint": st.text(min_size=1, max_size=200),
        "body": st.fixed_dictionaries(
            {}, optional={"model": st.text(min_size=1, max_size=256), "messages": _JSON}
        ),
    },
    optional={"metadata": st.dictionaries(st.text(max_size=3), _JSON, max_size=3)},
)


@settings(max_examples=300, deadline=None)
@given(fields=_TAKEN)
def test_the_usual_body_is_taken_alike(fields: dict[str, Any]) -> None:
    """Not every generated body is a refusal: the usual one is taken, by both, alike."""
    got = answer(submit_body.spec_of, fields)
    assert got[0] == "spec" and got == answer(by_model, fields)
