"""The published OpenAPI document: FastAPI's generated schema, completed after the fact so that
the route modules stay as they are. It adds bearer `securitySchemes`, an example for every
request and response, per-operation error lists that say what each operation can answer, and
the problem+json schema under its real content type. `/docs` and `/redoc` render it offline
(docs_assets)."""

from __future__ import annotations

import contextlib
import copy
import http
import re
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from jobgate.http import docs_assets

PROBLEM_MEDIA_TYPE = "application/problem+json"
PROBLEM_REF = "#/components/schemas/ProblemOut"
TENANT_SCHEME = "tenantKey"
OPERATOR_SCHEME = "operatorKey"

# The shape problems.problem() writes (RFC 9457 plus OpenAI's `error` member).
PROBLEM_SCHEMA: dict[str, Any] = {
    "title": "ProblemOut",
    "type": "object",
    "description": "RFC 9457 problem details, with an OpenAI-shaped `error` member.",
    "required": ["type", "title", "status", "detail", "code", "error"],
    "properties": {
        "type": {"type": "string", "description": "`/problems/{code}`"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string", "description": "What went wrong, for people"},
        "code": {"type": "string", "description": "What went wrong, for programs"},
        "error": {
            "type": "object",
            "required": ["message", "type", "code", "param"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string", "description": "OpenAI's error type"},
                "code": {
                    "anyOf": [{"type": "string"}, {"type": "null"}],
                    "description": "OpenAI's error code (null where OpenAI sends none, as "
                    "for a missing object on its routes)",
                },
                "param": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            },
        },
        "reason": {"type": "string", "description": "Why a webhook URL was refused (422)"},
        "limit": {"type": "string", "description": "Which limit was reached (403, 429)"},
    },
}

# status -> (description, code, detail) of the example problem shown for it.
ERRORS: dict[int, tuple[str, str, str]] = {
    400: ("Invalid request: a parameter, header or body field is wrong (the `param` names it)",
          "invalid_request", "body.model: Field required"),
    401: ("Missing or unknown API key", "unauthorized",
          "missing API key: send 'Authorization: Bearer <key>'"),
    403: ("A tenant limit forbids it (allowed models or providers, output tokens)",
          "limit_exceeded", "model 'gpt-4o' is not allowed for this tenant"),
    404: ("No such object for this tenant (another tenant's looks missing too)", "not_found",
          "no job with id 'job_01jd0000000000000000000000'"),
    409: ("The same Idempotency-Key is still being processed, or the object is in a state that "
          "does not allow it; retry after `Retry-After`", "idempotency_key_in_progress",
          "a request with this Idempotency-Key is still being processed"),
    413: ("The request body is over JOBGATE_MAX_BODY_BYTES", "payload_too_large",
          "request body over 1048576 bytes"),
    422: ("The Idempotency-Key was used with another body, or the webhook URL is refused by the "
          "SSRF guard (the `reason` says why)", "idempotency_key_reused",
          "this Idempotency-Key was already used with a different request body"),
    429: ("A queue is full; retry after `Retry-After`", "queue_full",
          "queue is full (max_queued); retry later"),
    503: ("The database cannot be reached; retry after `Retry-After`", "storage_unavailable",
          "storage unavailable"),
}  # fmt: skip
_ERROR_TYPES = {
    400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
    404: "not_found_error", 409: "invalid_request_error", 413: "invalid_request_error",
    422: "invalid_request_error", 429: "rate_limit_error", 503: "server_error",
}  # fmt: skip

_OTHER_ERROR = ("Refused", "invalid_request", "the request was refused")
_PLACEHOLDER_DESCRIPTIONS = frozenset({None, "", "Additional Response", "Validation Error"})

# Operations that create work, so answer backpressure and tenant limits.
_SUBMITS = re.compile(r"^POST /v1/(jobs|responses|jobs/bulk|batches)$")
# Beyond the rules in error_statuses: what else an operation answers, by "METHOD path".
EXTRA_ERRORS: dict[str, set[int]] = {
    "POST /v1/webhook_endpoints": {422},
    "PATCH /v1/webhook_endpoints/{endpoint_id}": {422},
    "POST /v1/webhook_endpoints/{endpoint_id}/test": {422},
    "POST /v1/jobs/{job_id}/retry": {409, 429},
    "POST /v1/batches": {404},  # an input file that does not exist
    "POST /v1/responses": {404},  # a `conversation` that does not exist (OpenAI answers 404)
    "POST /v1/jobs/{job_id}/tokens": {409},  # a purged job
}

_JOB_ID = "job_01jd3m5vq8x2k7c9hzt4w6r0pa"
EXAMPLES: dict[str, Any] = {
    "SubmitJobRequest": {
        "endpoint": "/v1/chat/completions",
        "body": {
            "model": "sim-echo",
            "messages": [{"role": "user", "content": "hello"}],
            "sim": {"latency_s": 2},
        },
        "metadata": {"ticket": "42"},
    },
    "JobOut": {
        "id": _JOB_ID,
        "object": "job",
        "status": "succeeded",
        "provider": "sim",
        "endpoint": "/v1/chat/completions",
        "model": "sim-echo",
        "created_at": 1764590400,
        "started_at": 1764590400,
        "completed_at": 1764590402,
        "cancel_requested_at": None,
        "expires_at": None,
        "attempt": 1,
        "max_attempts": 3,
        "priority": 5,
        "phase": None,
        "provider_job_id": None,
        "provider_request_id": None,
        "creation_outcome": None,
        "cancel_outcome": None,
        "progress": None,
        "run_at": 1764590400,
        "concurrency_key": None,
        "last_checked_at": None,
        "result": {
            "object": "chat.completion",
            "model": "sim-echo",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "echo: hello"},
                    "finish_reason": "stop",
                }
            ],
        },
        "error": None,
        "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
        "metadata": {"ticket": "42"},
        "dead_lettered": False,
        "purged": False,
    },
    "CreateEndpointRequest": {
        "url": "https://example.com/jobgate",
        "event_types": ["job.succeeded", "job.failed"],
        "description": "billing",
    },
    "CreateResponseRequest": {"model": "sim-echo", "input": "Write the report", "background": True},
}

# A property name -> the value a generated example gives it (when its schema allows it).
_NAMED_VALUES: dict[str, Any] = {
    "id": _JOB_ID, "job_id": _JOB_ID, "url": "https://example.com/jobgate",
    "secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "status": "succeeded",
    "provider": "sim", "model": "sim-echo", "endpoint": "/v1/chat/completions",
    "event_type": "job.succeeded", "type": "job.succeeded",
}  # fmt: skip


# An object's `object` value -> the prefix of its ids.
_ID_PREFIXES = {"response": "resp_", "webhook_endpoint": "ep_", "event": "evt_", "job": "job_"}


def install(app: FastAPI) -> None:
    """Serve the completed document at /openapi.json and render it at /docs and /redoc."""
    app.include_router(docs_assets.router)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            generated = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            app.openapi_schema = complete(generated)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def complete(schema: dict[str, Any]) -> dict[str, Any]:
    """A copy of FastAPI's `schema` with security, errors and examples filled in."""
    schema = copy.deepcopy(schema)
    components = schema.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    schemas["ProblemOut"] = PROBLEM_SCHEMA
    components["securitySchemes"] = {
        TENANT_SCHEME: {
            "type": "http",
            "scheme": "bearer",
            "description": "A tenant API key (`jg_…`): `jobgate serve` prints the default "
            "tenant's, `jobgate tenants create NAME` issues more.",
        },
        OPERATOR_SCHEME: {
            "type": "http",
            "scheme": "bearer",
            "description": "An operator key (`jgo_…`) for /metrics, pauses and the dashboard.",
        },
    }
    for path, operations in schema.get("paths", {}).items():
        for method, operation in operations.items():
            if method in ("get", "post", "put", "patch", "delete"):
                _complete_operation(method.upper(), path, operation, schemas)
    _drop_unused(schema, ("HTTPValidationError", "ValidationError"))
    return schema


def security_for(path: str) -> list[dict[str, list[str]]]:
    if path.startswith("/v1/provider_webhooks"):
        return []  # signed by the provider instead
    if path.startswith("/v1/pauses"):
        return [{OPERATOR_SCHEME: []}]
    if path.startswith("/v1/"):
        return [{TENANT_SCHEME: []}]
    if path == "/metrics":
        return [{OPERATOR_SCHEME: []}, {}]  # or public, with JOBGATE_METRICS_PUBLIC=1
    return []


def error_statuses(method: str, path: str, operation: dict[str, Any]) -> set[int]:
    """What the operation can answer besides success, from what it takes: a key (401), an id
    in the path or an `after` cursor (404), parameters or a body (400), a body (413), an
    Idempotency-Key (409, 422), new work (403, 429), the database (503)."""
    name = f"{method} {path}"
    statuses: set[int] = set()
    parameters = operation.get("parameters", [])
    has_body = "requestBody" in operation
    if path == "/metrics":
        return {401, 503}
    if path.startswith("/v1/provider_webhooks"):
        return {400, 404, 413, 503}
    if not path.startswith("/v1/"):
        return statuses
    statuses |= {401, 503}
    if "{" in path or any(p.get("in") == "query" and p.get("name") == "after" for p in parameters):
        statuses.add(404)  # an unknown id, in the path or as a list's `after` cursor
    if parameters or has_body:
        statuses.add(400)
    if has_body:
        statuses.add(413)
    if any(p.get("in") == "header" and p.get("name", "").lower() == "idempotency-key"
           for p in parameters):  # fmt: skip
        statuses |= {409, 422}
    if _SUBMITS.match(name):
        statuses |= {403, 429}
    return statuses | EXTRA_ERRORS.get(name, set())


def _complete_operation(
    method: str, path: str, operation: dict[str, Any], schemas: dict[str, Any]
) -> None:
    operation["security"] = security_for(path)
    responses: dict[str, Any] = operation.setdefault("responses", {})
    wanted = error_statuses(method, path, operation) | _described_errors(responses)
    for status in list(responses):
        if status.isdigit() and int(status) >= 400 and int(status) not in wanted:
            del responses[status]
    if path == "/metrics" and "200" in responses:
        responses["200"].setdefault("content", {})["text/plain"] = {
            "schema": {"type": "string"},
            "example": "# TYPE jobgate_queue_oldest_age_seconds gauge\n"
            'jobgate_queue_oldest_age_seconds{tenant="default"} 0.0\n',
        }
    if path == "/readyz":
        responses["503"] = {
            "description": "The database does not answer",
            "content": {"application/json": {"example": {"status": "unavailable"}}},
        }
    for error_status in sorted(wanted):
        description, code, detail = ERRORS.get(error_status, _OTHER_ERROR)
        existing = responses.get(str(error_status), {})
        responses[str(error_status)] = {
            "description": existing.get("description") or description,
            "content": {
                PROBLEM_MEDIA_TYPE: {
                    "schema": {"$ref": PROBLEM_REF},
                    "example": problem_example(error_status, code, detail),
                }
            },
        }
    for status, response in responses.items():
        if status.startswith("2"):
            _add_example(response.get("content", {}), schemas, fallback={"status": "ok"})
    body = operation.get("requestBody")
    if body is not None:
        _add_example(body.get("content", {}), schemas, fallback={})


def _described_errors(responses: dict[str, Any]) -> set[int]:
    """Error statuses a route declared with its own description: kept, whatever the rules say
    (FastAPI's placeholders, like the blanket lists routes used to declare, are not)."""
    described = set()
    for status, response in responses.items():
        if not status.isdigit() or int(status) < 400:
            continue
        description = response.get("description")
        with contextlib.suppress(ValueError):
            if description == http.HTTPStatus(int(status)).phrase:
                continue  # FastAPI's default for a status declared without one
        if description not in _PLACEHOLDER_DESCRIPTIONS:
            described.add(int(status))
    return described


def problem_example(status: int, code: str, detail: str) -> dict[str, Any]:
    description = ERRORS.get(status, _OTHER_ERROR)[0]
    return {
        "type": f"/problems/{code}",
        "title": description.split(":")[0].split(" (")[0],
        "status": status,
        "detail": detail,
        "code": code,
        "error": {
            "message": detail,
            "type": _ERROR_TYPES.get(status, "invalid_request_error"),
            "code": code,
            "param": None,
        },
    }


def _add_example(content: dict[str, Any], schemas: dict[str, Any], *, fallback: Any) -> None:
    for media_type, entry in list(content.items()):
        documented = media_type.endswith("json") or media_type == "multipart/form-data"
        if "example" in entry or "examples" in entry or not documented:
            continue
        entry_schema = entry.get("schema") or {}
        if not entry_schema and len(content) > 1:
            # FastAPI's placeholder beside the real media type (e.g. /metrics' text/plain).
            del content[media_type]
            continue
        ref_name = _ref_name(entry_schema)
        if ref_name in EXAMPLES:
            entry["example"] = EXAMPLES[ref_name]
        elif entry_schema:
            entry["example"] = sample(entry_schema, schemas)
        else:
            entry["example"] = fallback


def _ref_name(schema: dict[str, Any]) -> str | None:
    ref = schema.get("$ref")
    return ref.rsplit("/", 1)[-1] if isinstance(ref, str) else None


def sample(
    schema: dict[str, Any], schemas: dict[str, Any], *, name: str = "", depth: int = 0
) -> Any:
    """A plausible value for `schema`: its own example, default, const or first enum value,
    a named value for well-known properties, else the simplest value of its type."""
    if depth > 8:
        return None
    ref_name = _ref_name(schema)
    if ref_name is not None:
        if ref_name in EXAMPLES:
            return EXAMPLES[ref_name]
        return sample(schemas.get(ref_name, {}), schemas, name=name, depth=depth + 1)
    given = _given(schema)
    if given is not _NONE_GIVEN:
        return given
    for key in ("anyOf", "oneOf"):
        choices = schema.get(key, [])
        options = [option for option in choices if option.get("type") != "null"]
        if len(options) < len(choices) and name not in _NAMED_VALUES:
            return None  # a nullable field reads best as null in an example
        if options:
            return sample(options[0], schemas, name=name, depth=depth + 1)
    if schema.get("allOf"):
        return sample(schema["allOf"][0], schemas, name=name, depth=depth + 1)
    return _of_type(schema, schemas, name=name, depth=depth)


_NONE_GIVEN = object()


def _given(schema: dict[str, Any]) -> Any:
    """The value `schema` names itself (example, const, default, examples, enum), else
    _NONE_GIVEN."""
    for key in ("example", "const", "default"):
        if key in schema:
            return schema[key]
    if schema.get("examples"):
        return schema["examples"][0]
    if schema.get("enum"):
        return schema["enum"][0]
    return _NONE_GIVEN


def _of_type(schema: dict[str, Any], schemas: dict[str, Any], *, name: str, depth: int) -> Any:
    """The simplest value of `schema`'s type (an object's properties each sampled)."""
    kind = schema.get("type")
    if kind == "object" or "properties" in schema:
        properties = schema.get("properties", {})
        value = {
            key: sample(value, schemas, name=key, depth=depth + 1)
            for key, value in properties.items()
        }
        prefix = _ID_PREFIXES.get(str(properties.get("object", {}).get("const")))
        if prefix is not None and isinstance(value.get("id"), str):
            value["id"] = prefix + _JOB_ID.removeprefix("job_")
        return value
    if kind == "array":
        return [sample(schema.get("items", {}), schemas, name=name, depth=depth + 1)]
    if kind == "integer":
        return 1764590400 if name.endswith("_at") else int(schema.get("minimum", 0))
    if kind == "number":
        return float(schema.get("minimum", 0))
    if kind == "boolean":
        return False
    if kind == "string":
        return _NAMED_VALUES.get(name, "string")
    return None


def _drop_unused(schema: dict[str, Any], names: tuple[str, ...]) -> None:
    schemas = schema.get("components", {}).get("schemas", {})
    for name in names:
        if name not in schemas:
            continue
        rest = {key: value for key, value in schema.items() if key != "components"}
        others = {k: v for k, v in schemas.items() if k not in names}
        if f"#/components/schemas/{name}" not in repr((rest, others)):
            del schemas[name]
