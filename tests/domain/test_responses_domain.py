"""The Response object of a /v1/responses job, in every state, validated by the official
`openai` SDK in strict mode; its stream events; its webhook event types; and the checks on a
create request."""

from __future__ import annotations

import dataclasses
import itertools
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import openai._models
import pytest
from openai.types import webhooks
from openai.types.responses import Response, ResponseStreamEvent
from openai.types.webhooks import UnwrapWebhookEvent

from jobgate import errors
from jobgate.domain import events, response_events, response_requests, responses
from jobgate.domain.job import Job
from jobgate.domain.states import JobState
from jobgate.wire import responses_objects

T0 = datetime(2030, 1, 1, tzinfo=UTC)
REQUEST: dict[str, Any] = {
    "model": "sim-echo",
    "input": "hello",
    "instructions": "be brief",
    "background": True,
    "metadata": {"team": "a"},
    "max_output_tokens": 200,
    "temperature": 0.5,
    "tools": [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}],
    "tool_choice": "auto",
    "text": {"format": {"type": "text"}, "verbosity": "low"},
    "reasoning": {"effort": "low", "summary": None},
}
COMPLETED_RESULT: dict[str, Any] = {
    "id": "resp_upstream",
    "object": "response",
    "status": "completed",
    "model": "sim-echo-2030",
    "service_tier": "default",
    "output": [
        {
            "id": "rs_1",
            "type": "reasoning",
            "summary": [],
            "content": [{"type": "reasoning_text", "text": "thinking"}],
        },
        {
            "id": "msg_1",
            "type": "message",
            "status": "completed",
            "role": "assistant",
            "content": [
                {"type": "output_text", "text": "echo: hello", "annotations": []},
                {"type": "refusal", "refusal": "no"},
            ],
        },
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "lookup",
            "arguments": '{"q": 1}',
        },
    ],
    # An OpenAI-compatible server that leaves out the details (and cache_write_tokens).
    "usage": {"input_tokens": 7, "output_tokens": 5, "total_tokens": 12},
}


def make_job(state: JobState, **fields: Any) -> Job:
    values: dict[str, Any] = {
        "id": "resp_01abc",
        "tenant_id": "ten_1",
        "state": state,
        "api": "responses",
        "provider": "sim",
        "endpoint": "/v1/responses",
        "model": "sim-echo",
        "request": dict(REQUEST),
        "metadata": {"team": "a"},
        "webhook": None,
        "result": None,
        "error": None,
        "usage": None,
        "priority": 5,
        "attempt": 1,
        "max_attempts": 3,
        "run_count": 1,
        "lost_count": 0,
        "run_at": T0,
        "created_at": T0,
        "updated_at": T0,
        "started_at": None,
        "completed_at": None,
        "cancel_requested_at": None,
        "expires_at": None,
        "execution_timeout_s": None,
        "deadline_at": None,
        "lease_owner": None,
        "lease_token": None,
        "lease_expires_at": None,
        "phase": None,
        "provider_job_id": None,
        "creation_outcome": None,
        "cancel_outcome": None,
        "reconcile_at": None,
        "dead_lettered": False,
        "purged_at": None,
        "event_seq": 1,
    }
    values.update(fields)
    return Job(**values)


def strict(payload: dict[str, Any]) -> Response:
    """What the SDK does with `_strict_response_validation=True`, plus: no member outside the
    published schema except jobgate's documented `expired`."""
    model = openai._models.validate_type(type_=Response, value=payload)
    assert set(model.model_extra or {}) <= {"expired"}, model.model_extra
    return model


DONE = T0 + timedelta(seconds=3)
STATES: dict[str, Job] = {
    "queued": make_job(JobState.QUEUED),
    "in_progress": make_job(JobState.RUNNING, started_at=T0),
    "completed": make_job(
        JobState.SUCCEEDED, started_at=T0, completed_at=DONE, result=COMPLETED_RESULT
    ),
    "incomplete": make_job(
        JobState.SUCCEEDED,
        started_at=T0,
        completed_at=DONE,
        result={
            **COMPLETED_RESULT,
            "status": "incomplete",
            "incomplete_details": {"reason": "max_output_tokens"},
        },
    ),
    "failed": make_job(
        JobState.FAILED,
        started_at=T0,
        completed_at=DONE,
        error={"code": "deadline_exceeded", "message": "too slow", "type": "timeout_error"},
    ),
    "cancelled": make_job(JobState.CANCELLED, started_at=T0, completed_at=DONE),
    "expired": make_job(JobState.EXPIRED, completed_at=DONE),
}


@pytest.mark.parametrize("name", sorted(STATES))
def test_every_status_validates_strictly(name: str) -> None:
    job = STATES[name]
    body = responses.render(job)
    response = strict(body)
    assert response.id == job.id and response.object == "response"
    assert response.created_at == int(T0.timestamp())
    assert response.background is True
    assert response.instructions == "be brief"
    assert response.metadata == {"team": "a"}
    assert response.max_output_tokens == 200 and response.temperature == 0.5
    assert response.tools[0].type == "function"


def test_status_mapping() -> None:
    assert {name: strict(responses.render(job)).status for name, job in STATES.items()} == {
        "queued": "queued",
        "in_progress": "in_progress",
        "completed": "completed",
        "incomplete": "incomplete",
        "failed": "failed",
        "cancelled": "cancelled",
        "expired": "cancelled",
    }
    assert responses.render(STATES["expired"])["expired"] is True
    assert responses.render(STATES["cancelled"])["expired"] is False


def test_unfinished_responses_have_empty_output_and_no_usage() -> None:
    for name in ("queued", "in_progress", "failed", "cancelled", "expired"):
        response = strict(responses.render(STATES[name]))
        assert response.output == [] and response.usage is None and response.completed_at is None


def test_completed_response_carries_output_and_the_full_usage_shape() -> None:
    response = strict(responses.render(STATES["completed"]))
    assert response.output_text == "echo: hello"
    assert response.model == "sim-echo-2030" and response.service_tier == "default"
    assert response.completed_at == int(DONE.timestamp())
    assert response.usage is not None
    assert response.usage.model_dump(exclude_none=True) == {
        "input_tokens": 7,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 12,
    }
    call = response.output[2]
    assert call.type == "function_call" and call.id  # an id filled in where the server had none


def test_incomplete_response_says_why() -> None:
    response = strict(responses.render(STATES["incomplete"]))
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    odd = dataclasses.replace(
        STATES["incomplete"],
        result={**COMPLETED_RESULT, "status": "incomplete", "incomplete_details": {"reason": "x"}},
    )
    assert strict(responses.render(odd)).incomplete_details.reason is None  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("error", "code"),
    [
        ({"code": "deadline_exceeded", "message": "m", "type": "timeout_error"}, "server_error"),
        ({"code": "rate_limit_exceeded", "message": "m", "type": "x"}, "rate_limit_exceeded"),
        ({"code": "quota", "message": "m", "type": "rate_limit_error"}, "rate_limit_exceeded"),
        (
            {"code": "invalid_value", "message": "m", "type": "invalid_request_error"},
            "invalid_prompt",
        ),
        ({"code": "vector_store_timeout", "message": "m", "type": "x"}, "vector_store_timeout"),
        (None, "server_error"),
    ],
)
def test_failed_response_error_uses_openai_codes_and_keeps_ours_as_type(
    error: dict[str, Any] | None, code: str
) -> None:
    job = dataclasses.replace(STATES["failed"], error=error)
    response = strict(responses.render(job))
    assert response.error is not None
    assert response.error.code == code
    assert response.error.type == (error or {}).get("code", "server_error")
    assert response.error.message


def test_normalise_usage_keeps_details_and_fills_what_is_missing() -> None:
    usage = responses_objects.normalise_usage(
        {
            "input_tokens": 10,
            "input_tokens_details": {"cached_tokens": 4},
            "output_tokens": 6,
            "output_tokens_details": {"reasoning_tokens": 2},
            "total_tokens": 16,
        }
    )
    assert usage == responses_objects.usage_object(10, 6, cached_tokens=4, reasoning_tokens=2)
    assert responses_objects.normalise_usage(None) == responses_objects.usage_object(0, 0)
    assert responses_objects.normalise_usage({"input_tokens": True, "output_tokens": -3}) == (
        responses_objects.usage_object(0, 0)
    )


def test_settings_of_the_wrong_shape_are_never_echoed() -> None:
    job = make_job(
        JobState.QUEUED,
        request={"model": "m", "input": "x", "temperature": True, "tools": "no", "metadata": 3},
    )
    response = strict(responses.render(job))
    assert response.temperature == 1.0 and response.tools == [] and response.metadata == {}


# -- stream events ----------------------------------------------------------------------------


def strict_events(job: Job) -> list[Any]:
    return [
        openai._models.validate_type(type_=ResponseStreamEvent, value=event)  # type: ignore[arg-type]
        for event in response_events.stream_events(job)
    ]


@pytest.mark.parametrize("name", sorted(STATES))
def test_stream_events_validate_and_are_numbered_from_zero(name: str) -> None:
    parsed = strict_events(STATES[name])
    assert [event.sequence_number for event in parsed] == list(range(len(parsed)))
    assert parsed[0].type == "response.created" and parsed[1].type == "response.queued"


def test_stream_of_a_completed_response() -> None:
    types = [event["type"] for event in response_events.stream_events(STATES["completed"])]
    assert types == [
        "response.created",
        "response.queued",
        "response.in_progress",
        "response.output_item.added",  # reasoning
        "response.output_item.done",
        "response.output_item.added",  # message
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.content_part.added",
        "response.refusal.delta",
        "response.refusal.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",  # function call
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    delta = response_events.stream_events(STATES["completed"])[7]
    assert delta["delta"] == "echo: hello"


def test_stream_events_only_ever_append() -> None:
    """What a client saw before is a prefix of what it sees later: `starting_after` resumes."""
    lifecycle = [
        STATES["queued"],
        STATES["in_progress"],
        STATES["completed"],
    ]
    seen = [response_events.stream_events(job) for job in lifecycle]
    for earlier, later in itertools.pairwise(seen):
        assert later[: len(earlier)] == earlier


@pytest.mark.parametrize(
    ("name", "last"),
    [
        ("incomplete", "response.incomplete"),
        ("failed", "response.failed"),
        ("cancelled", "error"),
        ("expired", "error"),
    ],
)
def test_stream_ends_with_the_terminal_event(name: str, last: str) -> None:
    final = response_events.stream_events(STATES[name])[-1]
    assert final["type"] == last
    if last == "error":
        assert final["code"] in ("response_cancelled", "response_expired")


# -- webhook event types ----------------------------------------------------------------------


def test_webhook_event_types_for_responses() -> None:
    api = "responses"
    assert events.event_type_for(api, JobState.SUCCEEDED) == "response.completed"
    assert events.event_type_for(api, JobState.SUCCEEDED, "completed") == "response.completed"
    assert events.event_type_for(api, JobState.SUCCEEDED, "incomplete") == "response.incomplete"
    assert events.event_type_for(api, JobState.FAILED, "incomplete") == "response.failed"
    assert events.event_type_for(api, JobState.EXPIRED) == "response.cancelled"
    assert events.event_type_for("jobs", JobState.SUCCEEDED, "incomplete") == "job.succeeded"


RESPONSE_WEBHOOK_EVENTS = (
    webhooks.ResponseCompletedWebhookEvent,
    webhooks.ResponseIncompleteWebhookEvent,
    webhooks.ResponseFailedWebhookEvent,
    webhooks.ResponseCancelledWebhookEvent,
)


@pytest.mark.parametrize(
    "event_type",
    ["response.completed", "response.incomplete", "response.failed", "response.cancelled"],
)
def test_webhook_event_is_openais_thin_shape(event_type: str) -> None:
    payload = responses.webhook_event(
        event_id="evt_1", event_type=event_type, created_at=1, response_id="resp_1"
    )
    # UnwrapWebhookEvent is an annotated union, not a class: openai's own helper validates it.
    event: UnwrapWebhookEvent = openai._models.validate_type(
        type_=cast(Any, UnwrapWebhookEvent), value=payload
    )
    assert isinstance(event, RESPONSE_WEBHOOK_EVENTS)
    assert event.type == event_type and event.data.id == "resp_1"
    assert not event.model_extra and not event.data.model_extra


def test_webhook_body_with_the_response_is_cut_above_the_limit() -> None:
    event = responses.webhook_event(
        event_id="evt_1", event_type="response.completed", created_at=1, response_id="resp_1"
    )
    rendered = responses.render(STATES["completed"])
    assert b'"response_truncated":false' in responses.webhook_body(event, rendered, max_bytes=10**6)
    small = responses.webhook_body(event, rendered, max_bytes=100)
    assert b'"response_truncated":true' in small and b"echo" not in small


# -- create requests --------------------------------------------------------------------------


def test_parse_create_splits_stored_body_from_transport_and_extensions() -> None:
    parsed = response_requests.parse_create(
        {
            "model": "m",
            "input": "x",
            "stream": True,
            "background": True,
            "metadata": {"a": "b"},
            "webhook": {"url": "https://h.example/x"},
            "sim": {"latency_s": 1},
        }
    )
    assert parsed.stream and parsed.background
    assert parsed.body == {
        "model": "m",
        "input": "x",
        "background": True,
        "metadata": {"a": "b"},
        "sim": {"latency_s": 1},
    }
    assert parsed.metadata == {"a": "b"}
    assert parsed.webhook == {"url": "https://h.example/x"}
    assert response_requests.parse_create({"model": "m", "input": "x"}).body["background"] is False


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"previous_response_id": "resp_1", "conversation": "conv_1"}, "conversation"),
        ({"jobgate_context": {"items": []}}, "jobgate_context"),
        ({"background": True, "store": False}, "store"),
        ({"tools": [{"name": "x"}]}, "tools[0].type"),
        ({"tools": [{"type": "function", "name": "bad name!"}]}, "tools[0].name"),
        ({"tools": [{"type": "function", "name": "f", "parameters": []}]}, "tools[0].parameters"),
        ({"tools": [{"type": "file_search"}]}, "tools[0].vector_store_ids"),
        ({"tools": [{"type": "teleport"}]}, "tools[0].type"),
        ({"tool_choice": {"type": "function"}}, "tool_choice.name"),
        ({"tool_choice": {"type": "bogus"}}, "tool_choice.type"),
        ({"tool_choice": {"type": "allowed_tools", "mode": "x"}}, "tool_choice"),
        ({"text": {"format": {"type": "yaml"}}}, "text.format.type"),
        ({"text": {"format": {"type": "json_schema"}}}, "text.format"),
        ({"text": {"verbosity": "loud"}}, "text.verbosity"),
        ({"reasoning": {"effort": "extreme"}}, "reasoning.effort"),
        ({"reasoning": {"summary": "long"}}, "reasoning.summary"),
    ],
)
def test_parse_create_refuses_what_would_not_echo_or_run(
    fields: dict[str, Any], param: str
) -> None:
    with pytest.raises(errors.InvalidRequest) as raised:
        response_requests.parse_create({"model": "m", "input": "x", **fields})
    assert raised.value.param == param


def test_parse_create_accepts_valid_tools_and_choices() -> None:
    parsed = response_requests.parse_create(
        {
            "model": "m",
            "input": "x",
            "tools": [
                {"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": True},
                {"type": "web_search"},
                {"type": "file_search", "vector_store_ids": ["vs_1"]},
            ],
            "tool_choice": {"type": "function", "name": "f"},
            "text": {"format": {"type": "json_schema", "name": "s", "schema": {}}},
            "reasoning": {"effort": "high", "summary": "auto"},
        }
    )
    job = make_job(JobState.QUEUED, request=parsed.body)
    response = strict(responses.render(job))
    assert [tool.type for tool in response.tools] == ["function", "web_search", "file_search"]


@pytest.mark.parametrize(
    ("error", "status", "kind", "code"),
    [
        ({"code": "invalid_value", "type": "invalid_request_error"}, 400,
         "invalid_request_error", "invalid_prompt"),
        ({"code": "billing_hard_limit_reached", "type": "insufficient_quota"}, 429,
         "insufficient_quota", "billing_hard_limit_reached"),
        ({"code": "rate_limit_exceeded", "type": "rate_limit_error"}, 429,
         "rate_limit_error", "rate_limit_exceeded"),
        ({"code": "deadline_exceeded", "type": "timeout_error"}, 500, "server_error",
         "server_error"),
        ({"code": "worker_lost_repeatedly", "type": "job_error"}, 500, "server_error",
         "server_error"),
        ({"type": {"odd": 1}}, 500, "server_error", "server_error"),
        (None, 500, "server_error", "server_error"),
    ],
)  # fmt: skip
def test_a_failed_synchronous_create_answers_openais_http_error(
    error: dict[str, Any] | None, status: int, kind: str, code: str
) -> None:
    job = make_job(JobState.FAILED, completed_at=DONE, error=error)
    answered, body = responses.http_error(job)
    assert (answered, body["type"], body["code"], body["param"]) == (status, kind, code, None)
    assert isinstance(body["message"], str) and body["message"]
