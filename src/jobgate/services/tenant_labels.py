"""Tenant names for metric labels, with a bound on how many one process uses (metrics.py):
the first MAX_TENANT_LABELS tenants seen keep their name, later ones share OTHER_TENANT."""

from __future__ import annotations

from typing import Protocol

from jobgate import errors, metrics
from jobgate.storage.records import Tenant


class TenantReader(Protocol):
    async def tenant_get(
        self, *, tenant_id: str | None = None, name: str | None = None
    ) -> Tenant | None: ...


class TenantLabels:
    def __init__(self, storage: TenantReader, *, limit: int = metrics.MAX_TENANT_LABELS) -> None:
        self._storage = storage
        self._limit = limit
        self._names: dict[str, str] = {}  # tenant id -> label (names never change)

    async def label(self, tenant_id: str) -> str:
        """The label for a tenant: its name, or OTHER_TENANT once the bound is reached. Reads
        the database once per tenant and process; never raises."""
        known = self._names.get(tenant_id)
        if known is not None:
            return known
        if len(self._names) >= self._limit:
            return metrics.OTHER_TENANT
        try:
            tenant = await self._storage.tenant_get(tenant_id=tenant_id)
        except errors.StorageError:
            return metrics.OTHER_TENANT  # a label is not worth failing a claim for; ask again
        label = tenant.name if tenant is not None else metrics.OTHER_TENANT
        self._names[tenant_id] = label
        return label
