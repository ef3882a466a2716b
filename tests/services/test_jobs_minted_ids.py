"""A call's job ids are minted together (JobService.new_ids): `submit_many` and the bulk route
ask the id generator once per id prefix, and hand the ids out in the items' order."""

from __future__ import annotations

import pytest

from jobgate import errors
from jobgate.process.runtime import Runtime
from jobgate.services import submit_many
from jobgate.services.jobs import SubmitSpec
from jobgate.storage.records import SubmitOutcome
from jobgate.testing import SequentialIds

pytestmark = pytest.mark.asyncio


class RecordingIds(SequentialIds):
    """Sequential ids, with every request to the generator recorded."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, str, int]] = []

    def new(self, prefix: str) -> str:
        self.calls.append(("new", prefix, 1))
        return super().new(prefix)

    def new_many(self, prefix: str, count: int) -> list[str]:
        self.calls.append(("new_many", prefix, count))
        return [super(RecordingIds, self).new(prefix) for _ in range(count)]


def chat(text: str, id_prefix: str = "job") -> SubmitSpec:
    body = {"model": "sim-echo", "messages": [{"role": "user", "content": text}]}
    return SubmitSpec(
        endpoint="/v1/chat/completions", body=body, metadata={"text": text}, id_prefix=id_prefix
    )


async def test_submit_many_mints_its_ids_once_per_prefix(runtime: Runtime) -> None:
    tenant = (await runtime.tenants.create("acme")).tenant
    recording = RecordingIds()
    runtime.jobs.ids = recording
    specs = [chat("a"), chat("b", "resp"), chat("c"), chat("d")]
    stored = await runtime.jobs.submit_many(tenant_id=tenant.id, specs=specs)
    assert sorted(recording.calls) == [("new_many", "job", 3), ("new_many", "resp", 1)]
    assert [job.id for job in stored] == ["job_000001", "resp_000004", "job_000002", "job_000003"]
    assert [job.metadata["text"] for job in stored] == ["a", "b", "c", "d"]


async def test_a_bulk_call_mints_ids_for_the_items_it_prepares(runtime: Runtime) -> None:
    tenant = (await runtime.tenants.create("acme")).tenant
    recording = RecordingIds()
    runtime.jobs.ids = recording
    refused = errors.InvalidRequest("bad item", param="jobs")
    items = [
        submit_many.SubmitManyItem(chat("a")),
        submit_many.SubmitManyItem(None, refused=refused),  # refused at parse: no spec, no id
        submit_many.SubmitManyItem(chat("c"), idempotency_key="k"),
    ]
    results = await submit_many.submit_bulk(runtime.jobs, tenant_id=tenant.id, items=items)
    assert recording.calls == [("new_many", "job", 2)]
    first, second, third = results
    assert isinstance(first, SubmitOutcome) and first.job.id == "job_000001"
    assert second is refused
    assert isinstance(third, SubmitOutcome) and third.job.id == "job_000002"
