"""Small builders for storage tests."""

from __future__ import annotations

import itertools
from typing import Any

from jobgate.domain.job import NewJob
from jobgate.storage.protocol import Storage
from jobgate.storage.records import Tenant

_ids = itertools.count(1)


def new_job(tenant: Tenant, **fields: Any) -> NewJob:
    defaults: dict[str, Any] = {
        "id": f"job_{next(_ids):08d}",
        "tenant_id": tenant.id,
        "provider": "sim",
        "endpoint": "/v1/chat/completions",
        "model": "sim-echo",
        "request": {"model": "sim-echo", "messages": [{"role": "user", "content": "hi"}]},
        "metadata": {},
    }
    defaults.update(fields)
    return NewJob(**defaults)


async def make_tenant(storage: Storage, name: str = "acme") -> Tenant:
    return await storage.tenant_create(
        tenant_id=f"ten_{name}", name=name, webhook_secret=f"whsec_{name}"
    )
