"""One queued job held for each reason the claim can have (DESIGN §10, "Why a job waits"), set
up through the real API, for the tests of every surface that explains it: GET /v1/jobs/{id},
`jobgate why` and the console. A test module takes `runtime` from here (`limited_runtime`: the
simulator with a rate-limited model) and the `api` fixture."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Awaitable, Callable
from decimal import Decimal
from typing import Any

from jobgate.config import ModelLimits, ModelPrice, ProviderConfig, Settings
from jobgate.process.runtime import Runtime
from jobgate.providers.registry import ProviderRegistry
from jobgate.providers.simulated import SimProvider
from jobgate.storage.protocol import Storage
from jobgate.storage.records import LimitOverrides
from jobgate.testing import FakeClock, SequentialIds
from tests.api_server import Api

CHAT = "/v1/chat/completions"
LIMITED_MODEL = "sim-limited"  # one request a minute


def limited_runtime(storage: Storage, settings: Settings, clock: FakeClock) -> Runtime:
    """The built-in simulator, its model `sim-limited` held to one request a minute, and
    `sim-echo` priced (for cost budgets)."""
    config = ProviderConfig(
        kind="sim",
        model_prefixes=("sim-",),
        model_limits={LIMITED_MODEL: ModelLimits(rpm=1)},
        prices={"sim-echo": ModelPrice(input_per_mtok=Decimal(1), output_per_mtok=Decimal(1))},
    )
    registry = ProviderRegistry(
        {"sim": SimProvider("sim", clock=clock)}, configs={"sim": config}, default="sim"
    )
    priced = settings.model_copy(update={"providers": {"sim": config}})
    return Runtime(priced, storage=storage, clock=clock, ids=SequentialIds(), providers=registry)


@dataclasses.dataclass
class Tenant:
    api: Api
    name: str
    key: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    async def submit(self, model: str = "sim-echo", **options: Any) -> str:
        body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
        answer = await self.api.http.post(
            "/v1/jobs", json={"endpoint": CHAT, "body": body, **options}, headers=self.headers
        )
        assert answer.status_code == 202, answer.text
        job_id: str = answer.json()["id"]
        return job_id

    async def read(self, job_id: str) -> dict[str, Any]:
        answer = await self.api.http.get(f"/v1/jobs/{job_id}", headers=self.headers)
        assert answer.status_code == 200, answer.text
        view: dict[str, Any] = answer.json()
        return view


async def tenant(api: Api, name: str = "acme", *, worker: bool = True) -> Tenant:
    """A tenant, and (unless `worker` is False) a live worker process seen by the API."""
    if worker:
        await api.runtime.storage.role_heartbeat(role="worker", instance="proc_worker")
    return Tenant(api, name, await api.key(name))


async def limit(api: Api, name: str, **overrides: Any) -> None:
    """`jobgate tenants set NAME …`, in force at once."""
    found = await api.runtime.storage.tenant_get(name=name)
    assert found is not None
    await api.runtime.storage.tenant_limits_set(
        tenant_id=found.id, overrides=LimitOverrides(**overrides)
    )
    api.runtime.limits.invalidate()


async def operator_pause(api: Api, **scope: str) -> dict[str, Any]:
    operator = await api.runtime.operators.create("alice")
    answer = await api.http.post(
        "/v1/pauses", json=scope, headers={"Authorization": f"Bearer {operator}"}
    )
    assert answer.status_code == 201, answer.text
    pause: dict[str, Any] = answer.json()
    return pause


@dataclasses.dataclass
class Held:
    """A queued job held for `reason`, and its tenant."""

    reason: str
    tenant: Tenant
    job_id: str


async def scheduled(api: Api, clock: FakeClock) -> Held:
    acme = await tenant(api)
    run_at = int(clock.now().timestamp()) + 3600
    return Held("scheduled", acme, await acme.submit(run_at=run_at))


async def paused(api: Api, clock: FakeClock) -> Held:
    acme = await tenant(api)
    job_id = await acme.submit()
    await operator_pause(api, provider="sim", reason="provider incident")
    return Held("paused", acme, job_id)


async def no_worker(api: Api, clock: FakeClock) -> Held:
    acme = await tenant(api, worker=False)
    return Held("no_worker", acme, await acme.submit())


async def budget_exhausted(api: Api, clock: FakeClock) -> Held:
    acme = await tenant(api)
    await limit(api, "acme", daily_token_budget=2)
    await acme.submit()
    [done] = await api.runtime.worker().run_once()  # spends 3 tokens
    assert done is not None
    job_id = await acme.submit()
    api.runtime.limits.invalidate()
    return Held("budget_exhausted", acme, job_id)


async def breaker_open(api: Api, clock: FakeClock) -> Held:
    acme = await tenant(api)
    job_id = await acme.submit()
    # A worker (any process) opened it: the API reads the shared state every worker reads.
    await api.runtime.storage.breaker_open(provider="sim", open_s=120, opened_by="worker:x")
    return Held("breaker_open", acme, job_id)


async def rate_limited(api: Api, clock: FakeClock) -> Held:
    acme = await tenant(api)
    first, second = await acme.submit(LIMITED_MODEL), await acme.submit(LIMITED_MODEL)
    claimed = await api.runtime.worker().claim()
    assert [job.id for job in claimed] == [first]  # the minute's one request is taken
    return Held("rate_limited", acme, second)


async def tenant_cap(api: Api, clock: FakeClock) -> Held:
    acme = await tenant(api)
    await limit(api, "acme", max_running=1)
    first, second = await acme.submit(), await acme.submit()
    assert [job.id for job in await api.runtime.worker().claim()] == [first]
    return Held("tenant_cap", acme, second)


async def key_cap(api: Api, clock: FakeClock) -> Held:
    acme = await tenant(api)
    await limit(api, "acme", max_running_per_key=1)
    first = await acme.submit(concurrency_key="user-7")
    second = await acme.submit(concurrency_key="user-7")
    assert {job.id for job in await api.runtime.worker().claim(limit=1)} == {first}
    return Held("key_cap", acme, second)


async def queue(api: Api, clock: FakeClock) -> Held:
    acme = await tenant(api)
    await acme.submit()
    return Held("queue", acme, await acme.submit())


async def rpm_per_key(api: Api, clock: FakeClock) -> Held:
    acme = await tenant(api)
    await limit(api, "acme", rpm_per_key=1)
    first = await acme.submit(concurrency_key="user-7")
    second = await acme.submit(concurrency_key="user-7")
    assert [job.id for job in await api.runtime.worker().claim()] == [first]
    return Held("rate_limited", acme, second)


async def _key_over_budget(api: Api, reason: str, **budget: Any) -> Held:
    acme = await tenant(api)
    await limit(api, "acme", **budget)
    await acme.submit(concurrency_key="user-7")
    [done] = await api.runtime.worker().run_once()  # spends 3 tokens, $0.000003
    assert done is not None
    job_id = await acme.submit(concurrency_key="user-7")
    api.runtime.limits.invalidate()
    return Held(reason, acme, job_id)


async def daily_token_budget_per_key(api: Api, clock: FakeClock) -> Held:
    return await _key_over_budget(api, "budget_exhausted", daily_token_budget_per_key=3)


async def daily_cost_budget_usd_per_key(api: Api, clock: FakeClock) -> Held:
    return await _key_over_budget(api, "budget_exhausted", daily_cost_budget_usd_per_key=3e-6)


def steady(detail: str) -> str:
    """A wait's sentence without its count of seconds left (`~60 s`), which a later read
    on PostgreSQL's moving clock may put a second lower."""
    return re.sub(r"~\d+ s", "~N s", detail)


SCENARIOS: dict[str, Callable[[Api, FakeClock], Awaitable[Held]]] = {
    "scheduled": scheduled,
    "paused": paused,
    "no_worker": no_worker,
    "budget_exhausted": budget_exhausted,
    "breaker_open": breaker_open,
    "rate_limited": rate_limited,
    "tenant_cap": tenant_cap,
    "key_cap": key_cap,
    "queue": queue,
}

# A job held by each limit per concurrency key, by the limit's name (its reason is in `Held`).
KEY_SCENARIOS: dict[str, Callable[[Api, FakeClock], Awaitable[Held]]] = {
    "rpm_per_key": rpm_per_key,
    "daily_token_budget_per_key": daily_token_budget_per_key,
    "daily_cost_budget_usd_per_key": daily_cost_budget_usd_per_key,
}
