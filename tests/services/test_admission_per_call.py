"""Admission read once per call (LimitsService.admission): a bulk or batched submit asks for
the tenant's limits and the queue counts once, and each item is still judged in the order a
single submit is (allowed providers and models, the output-token cap, then a full queue)."""

from __future__ import annotations

import pytest

from jobgate import errors
from jobgate.config import ProviderConfig, Settings, TenantLimits
from jobgate.process.runtime import Runtime
from jobgate.services import submit_many
from jobgate.services.jobs import SubmitSpec
from jobgate.storage.records import SubmitOutcome
from jobgate.testing import FakeClock
from tests.storage.helpers import queued

CHAT = "/v1/chat/completions"


def chat(text: str = "hi", model: str = "sim-echo", **extra: object) -> SubmitSpec:
    body = {"model": model, "messages": [{"role": "user", "content": text}], **extra}
    return SubmitSpec(endpoint=CHAT, body=body)


@pytest.fixture
def settings() -> Settings:
    return Settings(
        database_url="sqlite:///unused.db",
        shutdown_grace_s=0,
        tenants={
            "toml": TenantLimits(max_queued=2, allowed_models=("sim-echo",), max_output_tokens=64)
        },
        providers={"sim": ProviderConfig(kind="sim", model_prefixes=("sim-",))},
    )


def count_calls(runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    for_tenant = runtime.limits.for_tenant

    async def spy(tenant_id: str) -> object:
        calls.append(tenant_id)
        return await for_tenant(tenant_id)

    monkeypatch.setattr(runtime.limits, "for_tenant", spy)
    return calls


async def test_a_bulk_call_reads_the_limits_once_and_judges_each_item(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    owner = (await runtime.tenants.create("toml")).tenant
    calls = count_calls(runtime, monkeypatch)
    items = [
        submit_many.SubmitManyItem(chat("a", max_tokens=5000)),
        submit_many.SubmitManyItem(chat("b", model="sim-big")),
        submit_many.SubmitManyItem(chat("c")),
    ]
    results = await submit_many.submit_bulk(runtime.jobs, tenant_id=owner.id, items=items)
    assert calls == [owner.id]
    first, refused, last = results
    assert isinstance(first, SubmitOutcome) and isinstance(last, SubmitOutcome)
    assert first.job.request is not None and first.job.request["max_tokens"] == 64  # capped
    assert isinstance(refused, errors.LimitExceeded) and refused.limit == "allowed_models"
    other = (await runtime.tenants.create("other")).tenant
    calls.clear()
    stored = await runtime.jobs.submit_many(tenant_id=other.id, specs=[chat("d")] * 3)
    assert len(stored) == 3 and calls == [other.id]


async def test_a_full_queue_refuses_each_item_alone_after_its_own_limits(
    runtime: Runtime, clock: FakeClock
) -> None:
    owner = (await runtime.tenants.create("toml")).tenant
    await runtime.jobs.submit_many(tenant_id=owner.id, specs=[chat("a"), chat("b")])
    clock.advance(1.1)  # queue counts are sampled once a second: the next one sees it full
    items = [
        submit_many.SubmitManyItem(chat("c")),
        submit_many.SubmitManyItem(chat("d", model="sim-big")),
        submit_many.SubmitManyItem(chat("e")),
    ]
    full, disallowed, also_full = await submit_many.submit_bulk(
        runtime.jobs, tenant_id=owner.id, items=items
    )
    assert isinstance(full, errors.QueueFull) and isinstance(also_full, errors.QueueFull)
    assert full is not also_full and full.limit == "max_queued"
    assert 1 <= full.retry_after_s <= 120
    assert isinstance(disallowed, errors.LimitExceeded)
    assert not isinstance(disallowed, errors.QueueFull)
    # The batched enqueue: the first item's own limit wins over the full queue, as before.
    with pytest.raises(errors.LimitExceeded) as caught:
        await runtime.jobs.submit_many(
            tenant_id=owner.id, specs=[chat("f", model="sim-big"), chat("g")]
        )
    assert caught.value.limit == "allowed_models"
    with pytest.raises(errors.QueueFull):
        await runtime.jobs.submit_many(tenant_id=owner.id, specs=[chat("h")])
    assert await queued(runtime.storage, owner.id) == 2
