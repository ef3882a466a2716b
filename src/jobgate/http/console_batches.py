"""The console's batches page: every tenant's recent batches with their status and request
counts as a progress bar, each linking to the jobs of its failed lines (issue 17)."""

from __future__ import annotations

import dataclasses
import urllib.parse

from fastapi import APIRouter
from starlette.responses import HTMLResponse

from jobgate.http.context import AppContext, Ctx
from jobgate.http.dashboard import Operator, render
from jobgate.services.batches import BatchService
from jobgate.storage.records import BatchRecord

router = APIRouter(prefix="/dashboard", include_in_schema=False)
PER_TENANT = 20  # the newest batches of each tenant
SHOWN = 100


@dataclasses.dataclass(frozen=True, slots=True)
class BatchRow:
    batch: BatchRecord
    tenant_name: str
    total: int
    completed: int
    failed: int

    @property
    def done_pct(self) -> float:
        return 100.0 * self.completed / self.total if self.total else 0.0

    @property
    def failed_pct(self) -> float:
        return 100.0 * self.failed / self.total if self.total else 0.0

    @property
    def failed_link(self) -> str:
        query = {"q": f"batch_id={self.batch.id}", "status": "failed"}
        return "/dashboard/jobs?" + urllib.parse.urlencode(query)


async def _rows(ctx: AppContext) -> list[BatchRow]:
    service = BatchService(storage=ctx.storage, settings=ctx.settings, ids=ctx.jobs.ids)
    found: list[tuple[BatchRecord, str]] = []
    for tenant in await ctx.storage.tenant_list():
        batches = await ctx.storage.batch_list(tenant_id=tenant.id, after=None, limit=PER_TENANT)
        found += [(batch, tenant.name) for batch in batches]
    found.sort(key=lambda pair: (pair[0].created_at, pair[0].id), reverse=True)
    rows = []
    for batch, name in found[:SHOWN]:
        counts = (await service.view(batch))["request_counts"]
        rows.append(BatchRow(batch, name, counts["total"], counts["completed"], counts["failed"]))
    return rows


@router.get("/batches")
async def batches_page(ctx: Ctx, who: Operator) -> HTMLResponse:
    return render(ctx, "batches.html", who, rows=await _rows(ctx))


@router.get("/live/batches")
async def batches_live(ctx: Ctx, who: Operator) -> HTMLResponse:
    return render(ctx, "batches_rows.html", who, rows=await _rows(ctx))
