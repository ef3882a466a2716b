"""Who acts on one job through the routes a job token may reach (`GET /v1/jobs/{id}`, its
`/stream` and `/events`, `POST /v1/jobs/{id}/cancel`): the job's tenant by API key, or the
bearer of a job token for that job and the route's scope (`Authorization: Bearer jgt_…`, or
`?token=jgt_…` where a browser cannot set a header, as EventSource cannot).

A token is refused exactly as an unknown key is, whatever it failed on. Its signature,
expiry, job and scope are checked without a read (services.job_tokens); that the job was not
purged since (a purge revokes its tokens) is checked on the job the route reads anyway
(`JobCaller.admit`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, Query, Request

from jobgate import errors
from jobgate.domain import job_tokens
from jobgate.domain.job import Job
from jobgate.http.context import AppContext, context, tenant_of
from jobgate.services.job_tokens import REFUSED
from jobgate.services.jobs import JobService

_TOKEN_QUERY = Query(
    description="A job token (`jgt_…`) for this job, for clients that cannot send an "
    "`Authorization` header (a browser's EventSource); never an API key"
)


@dataclasses.dataclass(frozen=True, slots=True)
class JobCaller:
    """The tenant whose job is acted on, and the token that allows it (None: its API key)."""

    tenant_id: str
    grant: job_tokens.Grant | None = None

    def admit(self, job: Job) -> Job:
        """`job`, unless the caller holds a token and the job was purged since: a purge revokes
        every token of the job, refused as an unknown key."""
        if self.grant is not None and job.purged_at is not None:
            raise errors.Unauthorized(REFUSED)
        return job

    async def check(self, jobs: JobService, job_id: str) -> None:
        """`admit` for a route that would not read the job otherwise (a key needs no read)."""
        if self.grant is not None:
            self.admit(await jobs.view(tenant_id=self.tenant_id, job_id=job_id))


def is_job_token(authorization: str) -> bool:
    """Whether an `Authorization` header carries a job token (whether valid or not)."""
    scheme, _, credential = authorization.partition(" ")
    return scheme.lower() == "bearer" and credential.strip().startswith(job_tokens.PREFIX)


def job_caller(scope: str) -> Callable[..., Awaitable[JobCaller]]:
    """The dependency of a route a token with `scope` may reach."""

    async def caller(
        request: Request, token: Annotated[str | None, _TOKEN_QUERY] = None
    ) -> JobCaller:
        job_id = str(request.path_params.get("job_id", ""))
        authorization = request.headers.get("authorization")
        return await caller_of(context(request), authorization, token, job_id, scope)

    return caller


async def caller_of(
    ctx: AppContext, authorization: str | None, token: str | None, job_id: str, scope: str
) -> JobCaller:
    """Who calls a route on `job_id` (the path's id as sent: it must equal a token's, which
    was a valid id when issued) that a token with `scope` may reach, by the `Authorization`
    header and the `?token=` query (None: absent); errors.Unauthorized otherwise."""
    if authorization is None and token is not None:
        credential = token  # only a job token: an API key never travels in a URL
    elif authorization is not None and is_job_token(authorization):
        credential = authorization.partition(" ")[2].strip()
    else:
        return JobCaller((await tenant_of(ctx, authorization or "")).id)
    grant = await ctx.job_tokens.verify(credential, job_id=job_id, scope=scope)
    return JobCaller(grant.tenant_id, grant)


JobReader = Annotated[JobCaller, Depends(job_caller("read"))]
JobStreamer = Annotated[JobCaller, Depends(job_caller("stream"))]
JobCanceller = Annotated[JobCaller, Depends(job_caller("cancel"))]
