"""The storage seam's shape: every Transactions method takes at most one request record, a
slotted dataclass of typed fields, never a dict or a mapping of named parameters (nor a field
that is one, but for the two mappings whose keys the SQL names); and record_params turns a
record into its SQL's named parameters."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Mapping, MutableMapping
from typing import Any

import pytest

from jobgate.storage import transactions
from jobgate.storage.transaction_requests import KeyPurgeWrite, record_params
from jobgate.storage.transactions import Transactions

_METHODS = sorted(
    name
    for name, member in inspect.getmembers(Transactions, inspect.isfunction)
    if not name.startswith("_")
)
_UNTYPED = (dict, Mapping, MutableMapping, Any, object)


def _params(method: str) -> list[inspect.Parameter]:
    signature = inspect.signature(getattr(Transactions, method))
    return [p for p in signature.parameters.values() if p.name != "self"]


def _request_type(method: str) -> Any:
    """The annotation of the method's one parameter, resolved (generic aliases to their class)."""
    hints = typing.get_type_hints(getattr(Transactions, method), vars(transactions))
    (param,) = _params(method)
    hint = hints[param.name]
    return typing.get_origin(hint) or hint


def test_the_protocol_names_its_methods() -> None:
    assert len(_METHODS) > 20
    assert {"claim", "settle_write", "delivery_write"} <= set(_METHODS)


@pytest.mark.parametrize("method", _METHODS)
def test_each_method_takes_at_most_one_positional_request(method: str) -> None:
    params = _params(method)
    assert len(params) <= 1, f"{method} takes {[p.name for p in params]}: one request record"
    for param in params:
        assert param.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
        assert param.default is inspect.Parameter.empty


@pytest.mark.parametrize("method", [m for m in _METHODS if _params(m)])
def test_each_request_is_a_slotted_record_not_a_mapping(method: str) -> None:
    request = _request_type(method)
    assert request not in _UNTYPED, f"{method} takes {request!r}: name its parameters"
    assert isinstance(request, type), f"{method} takes {request!r}, not a record class"
    assert not issubclass(request, Mapping), f"{method} takes a mapping: name its parameters"
    assert dataclasses.is_dataclass(request), f"{method}'s {request.__name__} is not a record"
    assert "__slots__" in vars(request), f"{method}'s {request.__name__} is not slotted"


# Mappings whose keys the SQL names (see each record's docstring for why).
_NAMED_BY_SQL = {("BulkChunkRequest", "pick"), ("BatchCancelWrite", "update")}


@pytest.mark.parametrize("method", [m for m in _METHODS if _params(m)])
def test_each_request_names_its_fields(method: str) -> None:
    request = _request_type(method)
    for field, hint in typing.get_type_hints(request).items():
        kinds = [typing.get_origin(arg) or arg for arg in typing.get_args(hint) or (hint,)]
        if (request.__name__, field) not in _NAMED_BY_SQL:
            mappings = [kind for kind in kinds if kind in (dict, Mapping, MutableMapping)]
            assert not mappings, f"{request.__name__}.{field} is a mapping: name its fields"


def test_record_params_are_its_fields_by_name() -> None:
    assert record_params(KeyPurgeWrite(limit=5, now=None)) == {"limit": 5, "now": None}


@dataclasses.dataclass(frozen=True, slots=True)
class _OneField:
    id: str


def test_record_params_of_a_one_field_record() -> None:
    assert record_params(_OneField("x")) == {"id": "x"}
