"""No tenant's job can close a shared token bucket for the others, on both backends: an output
cap past its provider's (or model's) bound is refused at submit, batch lines included; the
worker never charges a bucket more than its capacity (one minute of tokens); and a call that
ends without reported usage (refused, cancelled, timed out) gives its estimate back.
SQLite runs the buckets on the fake clock, PostgreSQL on its own."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from jobgate import errors
from jobgate.config import ModelLimits, ProviderConfig, Settings
from jobgate.domain.job import Job
from jobgate.domain.rate_limits import PROVIDER_WIDE, Bucket
from jobgate.domain.states import JobState
from jobgate.process.runtime import Runtime
from jobgate.providers.registry import ProviderRegistry
from jobgate.providers.simulated import SimProvider
from jobgate.services.batches import BatchService
from jobgate.services.files import FileService
from jobgate.services.jobs import SubmitSpec
from jobgate.storage.protocol import Storage
from jobgate.testing import FakeClock, SequentialIds
from tests.storage.helpers import make_tenant, new_job, submit_one

pytestmark = pytest.mark.asyncio
CHAT = "/v1/chat/completions"
TPM = 6000  # 100 tokens a second: one minute of tokens is 6,000
BUCKET = Bucket("sim", PROVIDER_WIDE, tpm=TPM)


@pytest.fixture
def limited(storage: Storage, settings: Settings, clock: FakeClock) -> Runtime:
    """A runtime whose `sim` provider has a shared tpm; `sim-small` allows 1,000 output tokens."""
    config = ProviderConfig(
        kind="sim",
        model_prefixes=("sim-",),
        tpm=TPM,
        model_limits={"sim-small": ModelLimits(max_output_tokens=1000)},
    )
    registry = ProviderRegistry(
        {"sim": SimProvider("sim", clock=clock)}, configs={"sim": config}, default="sim"
    )
    return Runtime(settings, storage=storage, clock=clock, ids=SequentialIds(), providers=registry)


def chat(model: str = "sim-echo", **fields: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], **fields}


async def submit(runtime: Runtime, tenant: str, body: dict[str, Any]) -> Job:
    found = await runtime.storage.tenant_get(name=tenant)
    owner = found.id if found else (await runtime.tenants.create(tenant)).tenant.id
    spec = SubmitSpec(endpoint=CHAT, body=body)
    return (await runtime.jobs.submit(tenant_id=owner, spec=spec)).job


async def tenant_id(runtime: Runtime, name: str) -> str:
    found = await runtime.storage.tenant_get(name=name)
    assert found is not None
    return found.id


async def owed_s(storage: Storage) -> float:
    """Seconds until the provider's token bucket admits the next request (0: it does now)."""
    return (await storage.rate_limit_waits(buckets=[BUCKET])).get(("sim", PROVIDER_WIDE), 0.0)


# -- the bound at submit ------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens", "max_output_tokens"])
async def test_an_output_cap_past_the_providers_bound_is_refused(
    limited: Runtime, field: str
) -> None:
    with pytest.raises(errors.InvalidRequest) as refused:
        await submit(limited, "a", {**chat(), field: 10**15})
    assert refused.value.param == f"body.{field}"
    assert "128000" in refused.value.message and "max_output_tokens" in refused.value.message
    assert await limited.storage.job_list(tenant_id=await tenant_id(limited, "a")) == []


async def test_a_models_bound_overrides_its_providers(limited: Runtime) -> None:
    assert (await submit(limited, "a", chat(max_tokens=128_000))).state is JobState.QUEUED
    assert (await submit(limited, "a", chat("sim-small", max_tokens=1000))).model == "sim-small"
    with pytest.raises(errors.InvalidRequest) as refused:
        await submit(limited, "a", chat("sim-small", max_tokens=1001))
    assert "1000" in refused.value.message and "sim-small" in refused.value.message


@pytest.mark.parametrize("cap", [0, -1, 1e15, 10**15])
async def test_a_cap_below_one_or_past_the_bound_is_refused(limited: Runtime, cap: Any) -> None:
    with pytest.raises(errors.InvalidRequest) as refused:
        await submit(limited, "a", chat(max_tokens=cap))
    assert refused.value.param == "body.max_tokens"


async def test_a_batch_line_past_the_bound_is_an_error_line(limited: Runtime) -> None:
    tenant = (await limited.tenants.create("a")).tenant.id
    lines = [
        {"custom_id": "big", "method": "POST", "url": CHAT, "body": chat(max_tokens=10**15)},
        {"custom_id": "fine", "method": "POST", "url": CHAT, "body": chat(max_tokens=100)},
    ]

    async def data() -> Any:
        for line in lines:
            yield orjson.dumps(line) + b"\n"

    files = FileService(storage=limited.storage, settings=limited.settings, ids=limited.ids)
    upload = await files.upload(
        tenant_id=tenant, purpose=lambda: "batch", filename="in.jsonl", data=data()
    )
    batches = BatchService(storage=limited.storage, settings=limited.settings, ids=limited.ids)
    batch = await batches.create(
        tenant_id=tenant,
        input_file_id=upload.id,
        endpoint=CHAT,
        completion_window="24h",
        metadata=None,
    )
    runner = limited.batch_runner()
    for _ in range(20):
        await runner.batches_once()
        if (await limited.storage.batch_counts(batch_id=batch.id)).items == 2:
            break
    big, fine = await limited.storage.batch_items_page(batch_id=batch.id, after_line=0, limit=10)
    assert (big.custom_id, big.job_id) == ("big", None)
    assert big.item_error is not None and big.item_error["param"] == "body.max_tokens"
    assert fine.custom_id == "fine" and fine.job_id is not None


# -- the worker's charges -----------------------------------------------------------------------


async def test_one_job_never_owes_more_than_a_minute_of_tokens(
    storage: Storage, limited: Runtime, clock: FakeClock
) -> None:
    """A job stored with a cap the bound now refuses (before an upgrade, say) is charged at
    most the bucket's capacity, and its estimate is given back when the provider refuses it."""
    tenant = await make_tenant(storage)
    request = chat(max_tokens=10**15, sim={"fail_with": "invalid_request"})
    await submit_one(storage, job=new_job(tenant, request=request), now=clock.now())
    worker = limited.worker()
    (claimed,) = await worker.claim()
    assert 50.0 <= await owed_s(storage) <= 60.0  # one minute, less the time since (PostgreSQL)
    done = await worker.execute(claimed)
    assert done is not None and done.state is JobState.FAILED
    assert await owed_s(storage) == 0.0


async def test_a_cancelled_call_gives_its_estimate_back(storage: Storage, limited: Runtime) -> None:
    job = await submit(limited, "a", chat(max_tokens=100_000))
    worker = limited.worker()
    (claimed,) = await worker.claim()
    assert await owed_s(storage) > 0
    await limited.jobs.cancel(tenant_id=job.tenant_id, job_id=job.id)
    worker.on_cancel_requested([job.id])
    done = await worker.execute(claimed)
    assert done is not None and done.state is JobState.CANCELLED
    assert await owed_s(storage) == 0.0


async def test_a_call_past_its_deadline_gives_its_estimate_back(
    storage: Storage, limited: Runtime, clock: FakeClock
) -> None:
    tenant = (await limited.tenants.create("a")).tenant.id
    spec = SubmitSpec(endpoint=CHAT, body=chat(max_tokens=100_000), execution_timeout_s=5)
    await limited.jobs.submit(tenant_id=tenant, spec=spec)
    worker = limited.worker()
    (claimed,) = await worker.claim()
    assert await owed_s(storage) > 0
    clock.advance(6)  # the worker's clock: the deadline passed before the call began
    done = await worker.execute(claimed)
    assert done is not None and done.state is JobState.FAILED
    failed = await storage.job_get(job_id=claimed.id)
    assert failed is not None and failed.error is not None
    assert failed.error["code"] == "deadline_exceeded"
    assert await owed_s(storage) == 0.0


async def test_a_refused_job_of_one_tenant_does_not_hold_back_another(
    storage: Storage, limited: Runtime
) -> None:
    """Tenant A's job asks for 100,000 output tokens (within the bound) and the provider
    refuses it: its estimate is charged (at most one minute of tokens) and given back when the
    call ends without usage, so tenant B's job on the same provider starts at once."""
    bad = await submit(limited, "a", chat(max_tokens=100_000, sim={"fail_with": "invalid_request"}))
    worker = limited.worker()
    (claimed,) = await worker.claim()
    assert claimed.id == bad.id
    assert 0 < await owed_s(storage) <= 60.0
    good = await submit(limited, "b", chat(max_tokens=100))
    done = await worker.execute(claimed)
    assert done is not None and done.state is JobState.FAILED
    assert await owed_s(storage) == 0.0
    (next_job,) = await worker.claim()
    assert next_job.id == good.id
