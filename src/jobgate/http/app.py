"""The ASGI application: routers, middleware and error handlers."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp

import jobgate
from jobgate import errors
from jobgate.http import openapi_doc, problems
from jobgate.http.console import batches as console_batches
from jobgate.http.console import dashboard
from jobgate.http.console import pauses as console_pauses
from jobgate.http.console import routes as console_routes
from jobgate.http.context import AppContext
from jobgate.http.front import HotFront
from jobgate.http.middleware.access_log import AccessLogMiddleware
from jobgate.http.middleware.body_limit import BodyLimitMiddleware
from jobgate.http.middleware.cors import CorsMiddleware
from jobgate.http.middleware.request_id import RequestIdMiddleware
from jobgate.http.routes import (
    batches,
    bulk_actions,
    conversations,
    files,
    health,
    job_tokens,
    jobs,
    metrics,
    pauses,
    provider_webhooks,
    responses,
    schedules,
    stream,
    submit_many,
    webhooks,
)
from jobgate.http.routes.hot import HotRoutesMiddleware


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
    app.include_router(submit_many.router)  # before jobs: /jobs/bulk is no job id
    app.include_router(bulk_actions.router)  # /jobs/bulk_cancel etc., likewise
    app.include_router(jobs.router)
    app.include_router(stream.router)
    app.include_router(job_tokens.router)
    app.include_router(files.router)
    app.include_router(batches.router)
    app.include_router(responses.router)
    app.include_router(conversations.router)
    app.include_router(schedules.router)
    app.include_router(pauses.router)
    app.include_router(webhooks.router)
    app.include_router(health.router)
    app.include_router(metrics.router)
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
        path_limits=files.body_limits(ctx.settings),
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
