"""parse_items reads the usual item inline (no _parse_item/_plain_spec call): every item of a
whole body must parse as _parse_item parses it alone (spec, raw body, key, refusal)."""

from __future__ import annotations

from typing import Any

import orjson

from jobgate.http import bulk_submit_routes as routes
from jobgate.services.bulk_submit import BulkSubmit
from tests.http.test_bulk_plain_items import BODY, CHAT, ITEMS, _refusal

MORE: list[Any] = [
    {"endpoint": CHAT, "body": BODY, "metadata": {"a": "1"}},
    {"endpoint": CHAT, "body": {**BODY, "model": "é" * 256}},
    {"endpoint": CHAT, "body": {**BODY, "model": "é" * 257}},
    {"endpoint": CHAT, "body": BODY, "metadata": {}, "idempotency_key": "k"},
    {"metadata": {}},
    {"endpoint": CHAT, "body": {"messages": []}},
    {"endpoint": CHAT, "body": {"model": "sim-echo", "sim": {}}},
    {"endpoint": CHAT, "body": {"model": "sim-echo"}, "metadata": {"sim": 1}},
    {"endpoint": CHAT, "body": {"model": "unknown-model"}},
    1,
    "x",
    True,
]


def _as_tuple(item: BulkSubmit) -> tuple[Any, ...]:
    return (item.spec, item.raw_body, item.idempotency_key, _refusal(item.refused))


def test_a_whole_body_parses_item_by_item_alike() -> None:
    items = [*ITEMS, *MORE]
    raw = b'{"jobs": [' + b",".join(orjson.dumps(i) for i in items) + b"]}"
    got = routes.parse_items(raw)
    again = orjson.loads(raw)["jobs"]
    want = [routes._parse_item(i, item) for i, item in enumerate(again)]
    assert [_as_tuple(g) for g in got] == [_as_tuple(w) for w in want]
    assert [type(g) for g in got] == [BulkSubmit] * len(items)


def test_an_inline_item_keeps_its_own_metadata_dict_apart() -> None:
    raw = orjson.dumps({"jobs": [{"endpoint": CHAT, "body": BODY, "metadata": {"a": 1}}] * 2})
    first, second = routes.parse_items(raw)
    assert first.spec is not None and second.spec is not None
    assert first.raw_body is not None and first.spec.metadata is not first.raw_body["metadata"]
    assert first.spec.metadata == {"a": 1} and first.spec.json_checked
    assert first.raw_body == {"endpoint": CHAT, "body": BODY, "metadata": {"a": 1}}
