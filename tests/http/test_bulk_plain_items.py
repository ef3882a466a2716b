"""A bulk item of only endpoint, body and metadata skips the model (bulk_submit_routes.
_plain_spec): every such item must give the very spec, or the very refusal, the model's path
gives, including at each bound the model declares."""

from __future__ import annotations

from typing import Any

import orjson
import pydantic
import pytest

from jobgate import errors
from jobgate.http.routes import submit_many as routes
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
    {"endpoint": CHAT, "body": {"model": "sim-echo", "sim": None}},
    {"endpoint": CHAT, "body": {"model": "sim-echo", "stream": True, "x": {"y": 1}}},
    {"endpoint": CHAT, "body": None},
    {"endpoint": CHAT, "body": []},
    {"endpoint": CHAT, "body": "text"},
    {"endpoint": CHAT, "body": BODY, "priority": 1},
    {"endpoint": CHAT, "body": BODY, "priority": True},
    {"endpoint": CHAT, "body": BODY, "unknown": 1},
    {"endpoint": CHAT, "body": BODY, "provider": "sim"},
    {"endpoint": CHAT, "body": BODY, "stream": True},
    {"endpoint": CHAT, "body": BODY, "delay_s": 5, "run_at": 5},
    {"endpoint": CHAT, "body": BODY, "idempotency_key": "k-1"},
    {"endpoint": CHAT, "body": BODY, "idempotency_key": None},
    {"endpoint": CHAT, "body": BODY, "idempotency_key": 5},
    {"endpoint": CHAT, "body": BODY, "idempotency_key": "k", "metadata": {"a": "b"}},
    {"endpoint": 1, "body": BODY, "idempotency_key": "k"},
    "not an object",
    None,
    [],
]


def _refusal(exc: errors.JobgateError | None) -> tuple[Any, ...] | None:
    if exc is None:
        return None
    return (type(exc), str(exc), exc.code, vars(exc))


def _as_model_parses(index: int, item: Any) -> SubmitManyItem:
    """The item through the model alone (no plain path)."""
    if not isinstance(item, dict):
        return routes._parse_item(index, item)
    fields = dict(item)
    key = fields.pop("idempotency_key", None)
    if key is not None and not isinstance(key, str):
        return routes._parse_item(index, item)
    return routes._model_item(fields, key)


@pytest.mark.parametrize("index", range(len(ITEMS)))
def test_every_item_parses_as_the_model_parses_it(index: int) -> None:
    item = ITEMS[index]
    got = routes._parse_item(index, item)
    want = _as_model_parses(index, item)
    assert got.spec == want.spec
    assert got.raw_body == want.raw_body
    assert got.idempotency_key == want.idempotency_key
    assert _refusal(got.refused) == _refusal(want.refused)


def test_the_usual_items_take_the_plain_path() -> None:
    """Not the model: the point of the plain path (its spec is equal, see above)."""
    assert routes._plain_spec({"endpoint": CHAT, "body": BODY}) is not None
    assert routes._plain_spec({"endpoint": CHAT, "body": BODY, "metadata": {"a": 1}}) is not None
    assert routes._plain_spec({"endpoint": CHAT, "body": BODY, "priority": 1}) is None


def test_a_plain_item_keeps_its_own_metadata_dict_apart() -> None:
    """As the model copies it: the spec's metadata is not the item's dict."""
    metadata = {"a": 1}
    spec = routes._plain_spec({"endpoint": CHAT, "body": BODY, "metadata": metadata})
    assert spec is not None and spec.metadata == metadata and spec.metadata is not metadata


def test_the_whole_body_parses_alike() -> None:
    raw = b'{"jobs": [' + b",".join(orjson.dumps(i) for i in ITEMS) + b"]}"
    got = routes.parse_items(raw)
    want = [_as_model_parses(i, item) for i, item in enumerate(ITEMS)]
    assert [(g.spec, _refusal(g.refused)) for g in got] == [
        (w.spec, _refusal(w.refused)) for w in want
    ]


def test_the_models_still_check_only_what_the_plain_path_checks() -> None:
    """_plain_spec restates what SubmitJobRequest and ProviderBody check of endpoint, body and
    metadata. A validator, a setting or a field added to either changes that: this fails,
    and _plain_spec must learn it (or leave such items to the model)."""
    from jobgate.http.schemas.native import ProviderBody, SubmitJobRequest

    def checks(model: type[pydantic.BaseModel]) -> dict[str, list[str]]:
        kinds = ("validators", "field_validators", "root_validators", "model_validators")
        return {k: sorted(getattr(model.__pydantic_decorators__, k)) for k in kinds}

    assert checks(SubmitJobRequest)["model_validators"] == ["_one_schedule"]  # run_at, delay_s
    assert checks(SubmitJobRequest)["field_validators"] == []
    assert all(not names for names in checks(ProviderBody).values())
    assert dict(SubmitJobRequest.model_config) == {"extra": "forbid"}
    assert dict(ProviderBody.model_config) == {"extra": "allow"}
    assert set(ProviderBody.model_fields) == {"model", "sim"}
    required = {name for name, f in SubmitJobRequest.model_fields.items() if f.is_required()}
    assert required == {"endpoint", "body"}
    metadata = SubmitJobRequest.model_fields["metadata"]
    assert metadata.annotation == dict[str, Any] and metadata.default_factory is dict
