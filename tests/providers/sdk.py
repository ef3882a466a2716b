"""Checks against the official SDKs' types: strict validation (what `_strict_response_validation`
does) and, beyond it, no member the published schema does not name (a misspelt field would
otherwise pass as an `extra`)."""

from __future__ import annotations

from typing import Any, TypeVar

import anthropic._models
import openai._models
import pydantic

T = TypeVar("T")


def _no_extras(value: Any, where: str) -> None:
    if isinstance(value, pydantic.BaseModel):
        extra = value.model_extra or {}
        assert not extra, f"{where}: members outside the schema: {sorted(extra)}"
        for name in type(value).model_fields:
            _no_extras(getattr(value, name), f"{where}.{name}")
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _no_extras(item, f"{where}[{index}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            _no_extras(item, f"{where}.{key}")


def openai_strict(type_: type[T], payload: Any) -> T:
    model = openai._models.validate_type(type_=type_, value=payload)
    _no_extras(model, getattr(type_, "__name__", str(type_)))
    return model


def anthropic_strict(type_: type[T], payload: Any) -> T:
    model = anthropic._models.validate_type(type_=type_, value=payload)
    _no_extras(model, getattr(type_, "__name__", str(type_)))
    return model


def request_matches(params_type: Any, body: dict[str, Any]) -> None:
    """A request body an adapter sent is valid for the SDK's create-params TypedDict: every
    member is one the schema names, and the values validate strictly."""
    known = set(params_type.__required_keys__) | set(params_type.__optional_keys__)
    unknown = set(body) - known
    assert not unknown, f"{params_type.__name__}: unknown members {sorted(unknown)}"
    pydantic.TypeAdapter(params_type).validate_python(body, strict=True)
