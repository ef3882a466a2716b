"""A batch line's request checked exactly as its HTTP route checks the same request: the strict
JSON limits (strict_json), the route's model, then what the route's handler checks, so that a
line is refused (an error line with its custom_id) whenever the route would answer it 4xx, and
a line's job is the job the route would store. The batches role is handed `check` by the
composition root (services do not import the edge)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pydantic

from jobgate import errors
from jobgate.domain import ranges, response_requests
from jobgate.http import problems, submit_body
from jobgate.http.schemas.responses import CreateResponseRequest
from jobgate.services import responses as responses_service
from jobgate.services.jobs import SubmitSpec
from jobgate.wire import openai_batches as batches


def check(endpoint: str, body: dict[str, Any]) -> SubmitSpec:
    """The submit a batch line of `endpoint` makes with `body`; errors.InvalidRequest naming
    the parameter for anything its route refuses."""
    if endpoint == batches.RESPONSES:
        ranges.check_json(body)  # the route's strict parse of its body
        return _response(body)
    request = {"endpoint": endpoint, "body": body}  # POST /v1/jobs with the line's url and body
    ranges.check_json(request)  # the route's strict parse
    return submit_body.spec_of(request)


def _response(body: dict[str, Any]) -> SubmitSpec:
    """POST /v1/responses with the line's body, as the batch runs it: not in the background
    (the batch is), not streamed, no per-response webhook (the batch sends its events)."""
    for member in ("background", "stream"):
        if body.get(member) is True:
            raise errors.InvalidRequest(
                f"{member}: a batch line is run by its batch; leave {member} out",
                param=member,
                code="unsupported_parameter",
            )
    if body.get("webhook") is not None:
        raise errors.InvalidRequest(
            "webhook: a batch sends its own batch.* events; leave webhook out", param="webhook"
        )
    for member in ("previous_response_id", "conversation"):
        if body.get(member) is not None:
            raise errors.InvalidRequest(
                f"{member}: a batch line cannot continue earlier turns; send them in input",
                param=member,
                code="unsupported_parameter",
            )
    try:
        CreateResponseRequest.model_validate(body)
    except pydantic.ValidationError as exc:
        raise problems.invalid_request_of(exc) from None
    request = response_requests.parse_create(body)
    spec = responses_service.spec_of(request)
    return dataclasses.replace(spec, json_checked=True)
