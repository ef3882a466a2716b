"""The ASGI application: routers, middleware and error handlers."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp

import jobgate
from jobgate import errors
from jobgate.http import (
    batches_routes,
    bulk_routes,
    bulk_submit_routes,
    console_batches,
    console_pauses,
    console_routes,
    conversations_routes,
    dashboard,
    files_routes,
    health,
    job_tokens_routes,
    jobs_routes,
    metrics_route,
    openapi_doc,
    pauses_routes,
    problems,
    provider_webhooks,
    responses_routes,
    schedules_routes,
    stream_routes,
    webhooks_routes,
)
from jobgate.http.access_log import AccessLogMiddleware
from jobgate.http.body_limit import BodyLimitMiddleware
from jobgate.http.context import AppContext
from jobgate.http.cors import CorsMiddleware
from jobgate.http.front import HotFront
from jobgate.http.hot_routes import HotRoutesMiddleware
from jobgate.http.request_id import RequestIdMiddleware


def create_app(ctx: AppContext) -> FastAPI:
    """The API."""
    app = FastAPI(
        title="jobgate",
        version=jobgate.__version__,
        description="A durable asynchronous job gateway for long-running AI calls.",
        docs_url=None,  # served from packaged assets by openapi_doc, never from a CDN
        openapi_url="/openapi.json",
        redoc_url=None,
    )
    app.state.ctx = ctx
    app.include_router(bulk_submit_routes.router)  # before jobs_routes: /jobs/bulk is no job id
    app.include_router(bulk_routes.router)  # /jobs/bulk_cancel etc., likewise
    app.include_router(jobs_routes.router)
    app.include_router(stream_routes.router)
    app.include_router(job_tokens_routes.router)
    app.include_router(files_routes.router)
    app.include_router(batches_routes.router)
    app.include_router(responses_routes.router)
    app.include_router(conversations_routes.router)
    app.include_router(schedules_routes.router)
    app.include_router(pauses_routes.router)
    app.include_router(webhooks_routes.router)
    app.include_router(health.router)
    app.include_router(metrics_route.router)
    app.include_router(dashboard.root)
    app.include_router(dashboard.router)
    app.include_router(console_routes.router)
    app.include_router(console_batches.router)
    app.include_router(console_pauses.router)
    app.add_exception_handler(dashboard.LoginRequired, dashboard.login_redirect)
    app.include_router(provider_webhooks.router)
    app.add_exception_handler(errors.JobgateError, problems.handle_jobgate_error)
    app.add_exception_handler(RequestValidationError, problems.handle_validation_error)
    app.add_exception_handler(StarletteHTTPException, problems.handle_http_error)
    app.add_exception_handler(Exception, problems.handle_unexpected)
    # Innermost of ours: the hot routes are still wrapped by the body limit, log and request id.
    app.add_middleware(HotRoutesMiddleware)
    app.add_middleware(
        BodyLimitMiddleware,
        max_body_bytes=ctx.settings.max_body_bytes,
        path_limits=files_routes.body_limits(ctx.settings),
    )
    if ctx.settings.cors_origins:  # inside the access log: preflights are logged too
        app.add_middleware(CorsMiddleware, origins=ctx.settings.cors_origins)
    if ctx.settings.access_log:
        app.add_middleware(AccessLogMiddleware)
    app.add_middleware(dashboard.SecurityHeadersMiddleware)
    app.add_middleware(
        RequestIdMiddleware, answer=problems.unexpected
    )  # outermost of ours: every answer carries the id
    openapi_doc.install(app)
    return app


def serve_app(ctx: AppContext) -> ASGIApp:
    """What the server runs: the API behind http.front (the hot routes past FastAPI's outer
    layers, to the same handlers)."""
    return HotFront(create_app(ctx))
