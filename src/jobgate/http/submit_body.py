"""The one check of a submit body: POST /v1/jobs, each item of POST /v1/jobs/bulk and a batch
line of a native endpoint (http.batch_lines) take a body by it alone.

Its rules are SubmitJobRequest's, compiled from the model's own core schema (`_compiled`) into
a validator that makes plain dicts instead of model instances: every field keeps its schema
(types, bounds, literals, nested models' fields and extra members), so a body passes exactly
when the model takes it and a refusal names the same parameter with the same words. What the
compilation changes, and why it answers alike:

- a model becomes a typed dict of the same fields and extra-member rule; its type error is
  reworded as the model's (`_MODEL_TYPE`), the only error whose words name the class;
- the provider body's validated copy is never used (the body is kept as sent), so its extra
  members are ignored rather than copied, and its fields' defaults are not filled in;
- a top-level field's default is left out of the dict: SubmitSpec's default is the same
  (a test holds them equal);
- the model's validator (`_one_schedule`, which reads run_at and delay_s and refuses only
  both) runs on the fields as checked, as the model runs it after its fields.
"""

from __future__ import annotations

import types
from typing import Any

import pydantic
import pydantic_core

from jobgate import errors
from jobgate.http import problems
from jobgate.http.schemas.native import SubmitJobRequest
from jobgate.services.jobs import SubmitSpec

# Schema members that hold a nested schema (those the model's schema uses).
_NESTED = ("schema", "items_schema", "keys_schema", "values_schema")
_LEAVES = frozenset(("str", "int", "float", "bool", "literal", "any", "none"))
_WRAPPERS = frozenset(("default", "nullable", "list", "dict"))
# The fields the model's validator reads: it can refuse only a body that gives both.
_SCHEDULE = ("run_at", "delay_s")
# The provider body: checked, never copied (it is stored and sent as the client sent it).
_KEPT_AS_SENT = "body"


def _compiled(model: type[pydantic.BaseModel]) -> tuple[dict[str, Any], dict[tuple[str, ...], str]]:
    """`model`'s core schema with each model made a typed dict (see the module), and the
    location of each model in it -> the model's class name."""
    schema = model.__pydantic_core_schema__
    validators = model.__pydantic_decorators__.model_validators
    if set(validators) != {"_one_schedule"} or validators["_one_schedule"].info.mode != "after":
        raise TypeError(f"{model.__name__}'s validators changed: teach submit_body them")
    if schema["type"] != "function-after":
        raise TypeError(f"{model.__name__}'s schema is not its fields then its validator")
    models: dict[tuple[str, ...], str] = {}
    return _typed(schema["schema"], (), models, top=True, discarded=False), models


def _typed(
    schema: Any, at: tuple[str, ...], models: dict[tuple[str, ...], str], *, top: bool,
    discarded: bool,
) -> dict[str, Any]:  # fmt: skip
    kind = schema["type"]
    if kind == "model":
        return _typed_model(schema, at, models, top=top, discarded=discarded)
    if kind in _LEAVES:
        return dict(schema)
    if kind not in _WRAPPERS:
        raise TypeError(f"submit_body cannot compile a {kind!r} schema at {at}")
    out = dict(schema)
    for member in _NESTED:
        if member in out:
            out[member] = _typed(out[member], at, models, top=False, discarded=discarded)
    return out


def _typed_model(
    schema: Any, at: tuple[str, ...], models: dict[tuple[str, ...], str], *, top: bool,
    discarded: bool,
) -> dict[str, Any]:  # fmt: skip
    fields_schema = schema["schema"]
    if (
        fields_schema["type"] != "model-fields"
        or fields_schema.get("computed_fields")
        or schema.get("custom_init")
        or schema.get("post_init")
    ):
        raise TypeError(f"submit_body cannot compile the model at {at}")
    models[at] = schema["cls"].__name__
    fields = {}
    for name, field in fields_schema["fields"].items():
        value = field["schema"]
        required = value["type"] != "default"
        inner_discarded = discarded or (top and name == _KEPT_AS_SENT)
        if not required and (top or inner_discarded):
            value = value["schema"]  # no default filled in (see the module)
        fields[name] = {
            "type": "typed-dict-field",
            "schema": _typed(value, (*at, name), models, top=False, discarded=inner_discarded),
            "required": required,
        }
    config = dict(schema.get("config", {}))
    extra = config.get("extra_fields_behavior", "ignore")
    if discarded and extra == "allow":
        extra = "ignore"  # the same members pass; their copy would be thrown away
    config["extra_fields_behavior"] = extra
    return {"type": "typed-dict", "fields": fields, "config": config}


_SCHEMA, _MODELS = _compiled(SubmitJobRequest)
_VALIDATOR = pydantic_core.SchemaValidator(_SCHEMA)
_ONE_SCHEDULE = SubmitJobRequest.__pydantic_decorators__.model_validators["_one_schedule"].func
# What the model's validator reads of a field the body left out.
_DEFAULTS = {
    name: field.get_default(call_default_factory=True)
    for name, field in SubmitJobRequest.model_fields.items()
    if not field.is_required()
}
_MODEL_TYPE = "Input should be a valid dictionary or instance of {}"


def spec_of(fields: dict[str, Any]) -> SubmitSpec:
    """The submit of a body whose JSON limits were checked (the request's strict parse),
    exactly as SubmitJobRequest takes it; errors.InvalidRequest exactly as the route words the
    model's refusal (problems.invalid_request_of)."""
    try:
        checked = _VALIDATOR.validate_python(fields)
    except pydantic_core.ValidationError as exc:
        raise _refusal(exc) from None
    if _SCHEDULE[1] in checked and _SCHEDULE[0] in checked:
        _schedule_checked(checked)
    checked[_KEPT_AS_SENT] = fields[_KEPT_AS_SENT]
    checked["json_checked"] = True  # a member the check refuses in `fields` (extra forbidden)
    return SubmitSpec(**checked)


def _schedule_checked(checked: dict[str, Any]) -> None:
    """The model's validator, on the fields as checked; its refusal in pydantic's words for
    a ValueError a validator raises."""
    try:
        _ONE_SCHEDULE(types.SimpleNamespace(**{**_DEFAULTS, **checked}))
    except ValueError as exc:
        raise errors.InvalidRequest(f"Value error, {exc}") from None


def _refusal(exc: pydantic_core.ValidationError) -> errors.InvalidRequest:
    first = exc.errors(include_url=False, include_context=False, include_input=False)[0]
    loc = tuple(str(part) for part in first["loc"])
    message = first["msg"]
    if first["type"] == "dict_type" and loc in _MODELS:
        message = _MODEL_TYPE.format(_MODELS[loc])
    return problems.invalid_request_named(loc, message)
