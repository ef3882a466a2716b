"""Builders for webhook tests: endpoints, and jobs driven to a state so the triggers write
their outbox rows."""

from __future__ import annotations

import itertools
from typing import Any

from jobgate.domain.job import Job, Lease
from jobgate.domain.states import JobState
from jobgate.domain.verdicts import Finish
from jobgate.services.tenants import new_webhook_secret
from jobgate.storage.protocol import Storage
from jobgate.storage.records import NewWebhookEndpoint, Tenant, WebhookEndpoint
from jobgate.testing import FakeClock
from tests.storage.helpers import finish_one, new_job, submit_one

_ids = itertools.count(1)


async def make_endpoint(
    storage: Storage, tenant: Tenant, clock: FakeClock, **fields: Any
) -> WebhookEndpoint:
    values: dict[str, Any] = {
        "id": f"ep_{next(_ids):06d}",
        "tenant_id": tenant.id,
        "url": "https://hooks.example/in",
        "secret": new_webhook_secret(),
    }
    values.update(fields)
    return await storage.webhook_endpoint_create(
        endpoint=NewWebhookEndpoint(**values), now=clock.now()
    )


async def finish_job(
    storage: Storage,
    clock: FakeClock,
    tenant: Tenant,
    *,
    state: JobState = JobState.SUCCEEDED,
    result: dict[str, Any] | None = None,
    **job_fields: Any,
) -> Job:
    """Insert a job, claim it and finish it in `state` (the triggers write the outbox)."""
    job = (await submit_one(storage, job=new_job(tenant, **job_fields), now=clock.now())).job
    claimed = await storage.job_claim(worker_id="w", limit=1, lease_ttl_s=60, now=clock.now())
    assert [c.id for c in claimed] == [job.id]
    return await finish_one(
        storage,
        finish=Finish(
            lease=Lease(job.id, claimed[0].lease_token or ""),
            state=state,
            reason="test",
            result=result if result is not None else {"ok": True},
        ),
        now=clock.now(),
    )
