"""What route handlers reach through `request.app.state.ctx`, and the auth dependency."""

from __future__ import annotations

import dataclasses
from typing import Annotated

from fastapi import Depends, Request

from jobgate import errors
from jobgate.config import Settings
from jobgate.services import operators
from jobgate.services.batch_counts import RecentBatchCounts
from jobgate.services.dashboard_views import DashboardViews
from jobgate.services.job_tokens import JobTokenService
from jobgate.services.jobs import JobService
from jobgate.services.live_feeds import LiveFeeds
from jobgate.services.operators import OperatorService
from jobgate.services.pauses import PauseService
from jobgate.services.presence import Presence
from jobgate.services.tenants import TenantService
from jobgate.services.waiting import Waits
from jobgate.services.webhooks import WebhookService
from jobgate.storage.protocol import ApiStorage
from jobgate.storage.records import Tenant


@dataclasses.dataclass(slots=True)
class AppContext:
    settings: Settings
    storage: ApiStorage
    jobs: JobService
    tenants: TenantService
    webhooks: WebhookService
    operators: OperatorService
    job_tokens: JobTokenService  # browser-safe credentials for one job
    batch_counts: RecentBatchCounts  # live batches' request counts, shared by the reads
    presence: Presence  # which roles have a live process
    waits: Waits  # why queued jobs wait
    feeds: LiveFeeds  # live stream readers: one feed per job, readers bounded per tenant

    @property
    def dashboard(self) -> DashboardViews:
        """The operator dashboard's reads across tenants."""
        return DashboardViews(storage=self.storage, jobs=self.jobs)

    @property
    def pauses(self) -> PauseService:
        """The operator's pauses of claims."""
        return PauseService(storage=self.storage, providers=self.jobs.providers, ids=self.jobs.ids)


def context(request: Request) -> AppContext:
    ctx: AppContext = request.app.state.ctx
    return ctx


async def authenticate(request: Request) -> Tenant:
    """The tenant whose Bearer key authorises this request (401 otherwise)."""
    return await tenant_of(context(request), request.headers.get("authorization", ""))


async def tenant_of(ctx: AppContext, authorization: str) -> Tenant:
    """The tenant an `Authorization` header's Bearer key names (errors.Unauthorized
    otherwise); shared with the hot path (http.routes.hot)."""
    scheme, _, key = authorization.partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise errors.Unauthorized("missing API key: send 'Authorization: Bearer <key>'")
    return await ctx.tenants.authenticate(key.strip())


@dataclasses.dataclass(frozen=True, slots=True)
class Caller:
    """Who calls a route that operators may call too: a tenant (its own objects), or an
    operator (every tenant's; `tenant` None)."""

    tenant: Tenant | None
    operator: str | None = None

    @property
    def actor(self) -> str:
        return "api" if self.operator is None else f"operator:{self.operator}"


async def caller_of(request: Request) -> Caller:
    """A Bearer key's caller: an operator key (jgo_…) an operator, any other key its tenant
    (errors.Unauthorized otherwise)."""
    ctx = context(request)
    scheme, _, key = request.headers.get("authorization", "").partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key:
        raise errors.Unauthorized("missing API key: send 'Authorization: Bearer <key>'")
    if key.startswith(operators.KEY_PREFIX):
        return Caller(None, await ctx.operators.authenticate(key))
    return Caller(await ctx.tenants.authenticate(key))


async def _context_dependency(request: Request) -> AppContext:
    # Async on purpose: FastAPI runs a plain `def` dependency in a worker thread, which costs
    # a thread hand-off on every request.
    return context(request)


Ctx = Annotated[AppContext, Depends(_context_dependency)]
CurrentTenant = Annotated[Tenant, Depends(authenticate)]
CurrentCaller = Annotated[Caller, Depends(caller_of)]
