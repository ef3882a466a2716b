"""The console's batches page: every tenant's recent batches with their status and request
counts as a progress bar, each linking to the jobs of its failed lines."""

from __future__ import annotations

import dataclasses
import urllib.parse

from fastapi import APIRouter
from starlette.responses import HTMLResponse

from jobgate.domain.states import JobState
from jobgate.http.console.dashboard import Operator, render
from jobgate.http.context import AppContext, Ctx
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
        query = {"q": f"batch_id={self.batch.id}", "status": JobState.FAILED.value}
        return "/dashboard/jobs?" + urllib.parse.urlencode(query)


async def _rows(ctx: AppContext) -> list[BatchRow]:
    found = await ctx.dashboard.batches(per_tenant=PER_TENANT)
    found.sort(key=lambda pair: (pair[0].created_at, pair[0].id), reverse=True)
    rows = []
    for batch, name in found[:SHOWN]:
        counts = await ctx.dashboard.batch_request_counts(batch)
        rows.append(BatchRow(batch, name, counts["total"], counts["completed"], counts["failed"]))
    return rows


@router.get("/batches")
async def batches_page(ctx: Ctx, who: Operator) -> HTMLResponse:
    return render(ctx, "batches.html", who, rows=await _rows(ctx))


@router.get("/live/batches")
async def batches_live(ctx: Ctx, who: Operator) -> HTMLResponse:
    return render(ctx, "batches_rows.html", who, rows=await _rows(ctx))
