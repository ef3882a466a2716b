"""`POST /v1/provider_webhooks/{provider}`: inbound provider events, verified over the raw body
and answered at once (the reconciler does the work)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from jobgate.http.context import Ctx
from jobgate.http.json_response import json_response
from jobgate.services.provider_events import ProviderEventService

router = APIRouter(prefix="/v1", tags=["providers"])


@router.post(
    "/provider_webhooks/{provider}",
    summary="Receive a provider's webhook",
    description="Standard Webhooks signature (webhook-id, webhook-timestamp, webhook-signature) "
    "checked over the raw body with the secret in the provider's `webhook_secret_env`, within "
    "±300 s. A redelivered event id answers 200 without being processed again.",
    responses={
        400: {"description": "signature or body rejected"},
        404: {"description": "no such endpoint"},
    },
)
async def receive_provider_webhook(provider: str, request: Request, ctx: Ctx) -> Response:
    body = await request.body()
    service = ProviderEventService(
        storage=ctx.storage, providers=ctx.jobs.providers, clock=ctx.jobs.clock
    )
    receipt = await service.receive(provider, request.headers, body)
    return json_response({"status": receipt.status, "event_id": receipt.event_id})
