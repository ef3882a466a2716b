"""The webhook API: tenant endpoints (secret shown once), the per-job signing secret, and a
job's delivery attempts."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from starlette.responses import Response

from jobgate.clock import from_unix, to_unix
from jobgate.domain import ranges
from jobgate.http.context import Ctx, CurrentTenant
from jobgate.http.json_response import json_response
from jobgate.http.object_ids import EndpointId, JobId
from jobgate.http.schemas.native import ProblemOut
from jobgate.http.schemas.webhooks import (
    CreateEndpointRequest,
    DeletedOut,
    DeliveryListOut,
    EndpointListOut,
    EndpointOut,
    PingOut,
    RecoverOut,
    RecoverRequest,
    RotateSecretRequest,
    SecretOut,
    UpdateEndpointRequest,
)
from jobgate.http.strict_json import StrictJsonRoute
from jobgate.services.webhooks import JobDelivery, WebhookService
from jobgate.storage.records import EndpointChanges, WebhookEndpoint

router = APIRouter(prefix="/v1", tags=["webhooks"], route_class=StrictJsonRoute)

_PROBLEMS: dict[int | str, dict[str, Any]] = {
    status: {"model": ProblemOut, "content": {"application/problem+json": {}}}
    for status in (400, 401, 404, 409, 422, 503)
}


def webhook_service(ctx: Ctx) -> WebhookService:
    return ctx.webhooks


Webhooks = Annotated[WebhookService, Depends(webhook_service)]


def endpoint_view(endpoint: WebhookEndpoint, *, with_secret: bool = False) -> dict[str, Any]:
    view: dict[str, Any] = {
        "id": endpoint.id,
        "object": "webhook_endpoint",
        "url": endpoint.url,
        "description": endpoint.description,
        "event_types": list(endpoint.event_types),
        "include_result": endpoint.include_result,
        "progress_interval_s": endpoint.progress_interval_s,
        "disabled": endpoint.disabled,
        "disabled_reason": endpoint.disabled_reason,
        "previous_secret_expires_at": to_unix(endpoint.previous_secret_expires_at)
        if endpoint.previous_secret
        else None,
        "created_at": to_unix(endpoint.created_at),
        "updated_at": to_unix(endpoint.updated_at),
    }
    if with_secret:
        view["secret"] = endpoint.secret
    return view


def delivery_view(delivery: JobDelivery) -> dict[str, Any]:
    entry = delivery.entry
    return {
        "id": entry.id,
        "object": "webhook_delivery",
        "event_id": entry.event_id,
        "event_type": entry.event_type,
        "endpoint_id": entry.endpoint_id,
        "url": entry.url,
        "status": entry.state,
        "attempts": [
            {
                "attempt": a.attempt,
                "status_code": a.status_code,
                "latency_ms": a.latency_ms,
                "error": a.error,
                "succeeded": a.succeeded,
                "created_at": to_unix(a.created_at),
            }
            for a in delivery.attempts
        ],
        "next_attempt_at": to_unix(entry.next_attempt_at) if entry.state == "pending" else None,
        "last_status_code": entry.last_status_code,
        "last_error": entry.last_error,
        "created_at": to_unix(entry.created_at),
        "completed_at": to_unix(entry.completed_at),
    }


@router.post(
    "/webhook_endpoints",
    status_code=201,
    response_model=EndpointOut,
    responses=_PROBLEMS,
    summary="Register a webhook endpoint",
    description="The URL is resolved and checked against the SSRF rules (422 naming the reason "
    "when refused). The answer carries the signing secret, shown only this once.",
)
async def create_endpoint(
    payload: CreateEndpointRequest, tenant: CurrentTenant, webhooks: Webhooks
) -> Response:
    endpoint = await webhooks.create(
        tenant_id=tenant.id,
        url=payload.url,
        event_types=payload.event_types,
        description=payload.description,
        include_result=payload.include_result,
        disabled=payload.disabled,
        progress_interval_s=payload.progress_interval_s,
    )
    return json_response(
        endpoint_view(endpoint, with_secret=True),
        201,
        {"Location": f"/v1/webhook_endpoints/{endpoint.id}"},
    )


@router.get(
    "/webhook_endpoints",
    response_model=EndpointListOut,
    responses=_PROBLEMS,
    summary="List webhook endpoints",
)
async def list_endpoints(
    tenant: CurrentTenant,
    webhooks: Webhooks,
    after: Annotated[
        EndpointId | None, Query(description="Id of the last endpoint of the previous page")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=ranges.MAX_PAGE)] = 20,
) -> Response:
    endpoints, has_more = await webhooks.list(tenant_id=tenant.id, after=after, limit=limit)
    return json_response(
        {
            "object": "list",
            "data": [endpoint_view(e) for e in endpoints],
            "has_more": has_more,
            "last_id": endpoints[-1].id if endpoints else None,
        }
    )


@router.get(
    "/webhook_endpoints/{endpoint_id}",
    response_model=EndpointOut,
    responses=_PROBLEMS,
    summary="Get a webhook endpoint",
)
async def get_endpoint(
    endpoint_id: EndpointId, tenant: CurrentTenant, webhooks: Webhooks
) -> Response:
    return json_response(
        endpoint_view(await webhooks.get(tenant_id=tenant.id, endpoint_id=endpoint_id))
    )


@router.patch(
    "/webhook_endpoints/{endpoint_id}",
    response_model=EndpointOut,
    responses=_PROBLEMS,
    summary="Update a webhook endpoint",
    description="Set `disabled: false` to enable an endpoint again (after a 410, for example).",
)
async def update_endpoint(
    endpoint_id: EndpointId,
    payload: UpdateEndpointRequest,
    tenant: CurrentTenant,
    webhooks: Webhooks,
) -> Response:
    changes = EndpointChanges(
        url=payload.url,
        description=payload.description,
        event_types=None if payload.event_types is None else tuple(payload.event_types),
        include_result=payload.include_result,
        disabled=payload.disabled,
        progress_interval_s=payload.progress_interval_s,
    )
    endpoint = await webhooks.update(tenant_id=tenant.id, endpoint_id=endpoint_id, changes=changes)
    return json_response(endpoint_view(endpoint))


@router.delete(
    "/webhook_endpoints/{endpoint_id}",
    response_model=DeletedOut,
    responses=_PROBLEMS,
    summary="Delete a webhook endpoint (its pending deliveries fail)",
)
async def delete_endpoint(
    endpoint_id: EndpointId, tenant: CurrentTenant, webhooks: Webhooks
) -> Response:
    await webhooks.delete(tenant_id=tenant.id, endpoint_id=endpoint_id)
    return json_response({"id": endpoint_id, "object": "webhook_endpoint", "deleted": True})


@router.post(
    "/webhook_endpoints/{endpoint_id}/rotate_secret",
    response_model=EndpointOut,
    responses=_PROBLEMS,
    summary="Rotate the signing secret",
    description="Answers the new secret (shown once). The old secret keeps signing, as a second "
    "`v1,` signature, for `grace_period_s` (default 24 h).",
)
async def rotate_secret(
    endpoint_id: EndpointId,
    tenant: CurrentTenant,
    webhooks: Webhooks,
    payload: RotateSecretRequest | None = None,
) -> Response:
    grace_s = (payload or RotateSecretRequest()).grace_period_s
    endpoint = await webhooks.rotate_secret(
        tenant_id=tenant.id, endpoint_id=endpoint_id, grace_s=grace_s
    )
    return json_response(endpoint_view(endpoint, with_secret=True))


@router.post(
    "/webhook_endpoints/{endpoint_id}/test",
    response_model=PingOut,
    responses=_PROBLEMS,
    summary="Send a signed ping now and answer its result",
)
async def test_endpoint(
    endpoint_id: EndpointId, tenant: CurrentTenant, webhooks: Webhooks
) -> Response:
    result = await webhooks.ping(tenant_id=tenant.id, endpoint_id=endpoint_id)
    return json_response(
        {
            "object": "webhook_test",
            "event_id": result.event_id,
            "succeeded": result.succeeded,
            "status_code": result.status_code,
            "latency_ms": result.latency_ms,
            "error": result.error,
        }
    )


@router.post(
    "/webhook_endpoints/{endpoint_id}/recover",
    response_model=RecoverOut,
    responses=_PROBLEMS,
    summary="Re-queue failed deliveries since a time",
)
async def recover_endpoint(
    endpoint_id: EndpointId, payload: RecoverRequest, tenant: CurrentTenant, webhooks: Webhooks
) -> Response:
    requeued = await webhooks.recover(
        tenant_id=tenant.id, endpoint_id=endpoint_id, since=from_unix(payload.since)
    )
    return json_response(
        {"object": "webhook_recovery", "endpoint_id": endpoint_id, "requeued": requeued}
    )


@router.get(
    "/webhook_secret",
    response_model=SecretOut,
    responses=_PROBLEMS,
    summary="The secret that signs per-job webhook URLs",
)
async def webhook_secret(tenant: CurrentTenant) -> Response:
    return json_response({"secret": tenant.webhook_secret})


@router.get(
    "/jobs/{job_id}/deliveries",
    response_model=DeliveryListOut,
    responses=_PROBLEMS,
    summary="A job's webhook deliveries and every attempt at each",
)
async def job_deliveries(job_id: JobId, tenant: CurrentTenant, webhooks: Webhooks) -> Response:
    deliveries = await webhooks.job_deliveries(tenant_id=tenant.id, job_id=job_id)
    return json_response({"object": "list", "data": [delivery_view(d) for d in deliveries]})
