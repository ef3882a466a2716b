"""JobService.preparer: the items of one call (submit_many, a bulk call) ask routing once per
(provider, model, api) they share, not once per item; a model route is still routed item by
item (its first target follows the breakers); and every answer and refusal is the one that
`prepare` gives for the item alone."""

from __future__ import annotations

from typing import Any

import pytest

from jobgate import errors
from jobgate.config import ProviderConfig, RouteConfig, Settings, TenantLimits
from jobgate.domain import limits as limits_rules
from jobgate.domain.job import NewJob
from jobgate.process.runtime import Runtime
from jobgate.providers.registry import ProviderRegistry
from jobgate.providers.simulated import SimProvider
from jobgate.services import limits as limits_service
from jobgate.services import submit_many
from jobgate.services.jobs import SubmitSpec
from jobgate.storage.protocol import Storage
from jobgate.storage.records import SubmitOutcome
from jobgate.testing import FakeClock, ScriptedProvider, SequentialIds

pytestmark = pytest.mark.asyncio
CHAT = "/v1/chat/completions"


def chat(model: Any = "sim-echo", provider: str | None = None, **fields: Any) -> SubmitSpec:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    return SubmitSpec(endpoint=CHAT, body=body, provider=provider, **fields)


@pytest.fixture
def routed(
    storage: Storage, settings: Settings, clock: FakeClock, scripted: ScriptedProvider
) -> Runtime:
    """The test runtime's providers, and a model route `smart` (scripted, then sim)."""
    registry = ProviderRegistry(
        {"sim": SimProvider("sim", clock=clock), "scripted": scripted},
        configs={
            "sim": ProviderConfig(kind="sim", model_prefixes=("sim-",)),
            "scripted": ProviderConfig(kind="sim", execution_timeout_s=7.0),
        },
        default="sim",
        routes={"smart": RouteConfig(targets=("scripted:any-model", "sim:sim-echo"))},
    )
    return Runtime(settings, storage=storage, clock=clock, ids=SequentialIds(), providers=registry)


def count(runtime: Runtime, monkeypatch: pytest.MonkeyPatch, method: str) -> list[tuple[Any, ...]]:
    calls: list[tuple[Any, ...]] = []
    original = getattr(runtime.providers, method)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append((*args, *kwargs.values()))
        return original(*args, **kwargs)

    monkeypatch.setattr(runtime.providers, method, counted)
    return calls


async def test_a_call_routes_each_provider_model_and_api_once(
    routed: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant = (await routed.tenants.create("acme")).tenant
    routes = count(routed, monkeypatch, "route")
    specs = [
        chat(),
        chat("sim-other"),
        chat(),
        chat("any", provider="scripted"),
        chat("sim-other"),
        chat("any", provider="scripted", api="responses"),
        chat("any", provider="scripted"),
        chat(),
    ]
    stored = await routed.jobs.submit_many(tenant_id=tenant.id, specs=specs)
    assert sorted(routes, key=str) == sorted(
        [
            (None, "sim-echo", "jobs"),
            (None, "sim-other", "jobs"),
            ("scripted", "any", "jobs"),
            ("scripted", "any", "responses"),
        ],
        key=str,
    )
    alone = [routed.jobs.prepare(tenant_id=tenant.id, spec=spec) for spec in specs]
    fields = ("provider", "model", "api", "execution_timeout_s", "model_route", "request")
    for job, expected in zip(stored, alone, strict=True):
        assert [getattr(job, f) for f in fields] == [getattr(expected, f) for f in fields]
    assert stored[3].execution_timeout_s == 7.0  # the provider's own default, per provider


async def test_a_model_route_is_routed_item_by_item(
    routed: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant = (await routed.tenants.create("acme")).tenant
    firsts = count(routed, monkeypatch, "first_target")
    specs = [chat("smart"), chat(), chat("smart"), chat("smart")]
    stored = await routed.jobs.submit_many(tenant_id=tenant.id, specs=specs)
    assert len(firsts) == 3  # each item of the route picks its target (by the breakers) itself
    assert [(j.provider, j.model, j.model_route) for j in stored] == [
        ("scripted", "any-model", "smart"),
        ("sim", "sim-echo", None),
        ("scripted", "any-model", "smart"),
        ("scripted", "any-model", "smart"),
    ]


async def test_a_refusal_is_raised_for_every_item_it_concerns(runtime: Runtime) -> None:
    """A routing refusal is not kept: each item that asks for it gets its own, as alone."""
    tenant = (await runtime.tenants.create("acme")).tenant
    items = [
        submit_many.SubmitManyItem(chat()),
        submit_many.SubmitManyItem(chat("gpt-nothing")),
        submit_many.SubmitManyItem(chat(provider="nobody")),
        submit_many.SubmitManyItem(chat("gpt-nothing")),
        submit_many.SubmitManyItem(chat(7)),
        submit_many.SubmitManyItem(chat(priority=99)),
        submit_many.SubmitManyItem(chat()),
    ]
    results = await submit_many.submit_bulk(runtime.jobs, tenant_id=tenant.id, items=items)
    for item, result in zip(items, results, strict=True):
        assert item.spec is not None
        try:
            runtime.jobs.prepare(tenant_id=tenant.id, spec=item.spec)
        except errors.JobgateError as alone:
            assert type(result) is type(alone) and str(result) == str(alone)
            assert getattr(result, "code", None) == getattr(alone, "code", None)
        else:
            assert isinstance(result, SubmitOutcome)
    assert [type(r).__name__ for r in results] == [
        "SubmitOutcome",
        "InvalidRequest",
        "UnknownProvider",
        "InvalidRequest",
        "InvalidRequest",
        "InvalidRequest",
        "SubmitOutcome",
    ]
    with pytest.raises(errors.InvalidRequest) as raised:
        await runtime.jobs.submit_many(
            tenant_id=tenant.id, specs=[chat(), chat(), chat("gpt-nothing")]
        )
    assert raised.value.code == "model_not_found"
    for model in (["a", "list"], {"an": "object"}, 7):  # not a string, hashable or not
        with pytest.raises(errors.InvalidRequest) as raised:
            await runtime.jobs.submit_many(tenant_id=tenant.id, specs=[chat(), chat(model)])
        assert raised.value.param == "body.model"


async def test_admit_asks_only_the_rules_the_tenant_has(monkeypatch: pytest.MonkeyPatch) -> None:
    """No allowed list and no output cap: nothing to judge (the rules are not even asked);
    with either, the rule still refuses or caps as before."""
    job = NewJob(
        id="job_1",
        tenant_id="ten_1",
        provider="sim",
        endpoint=CHAT,
        model="sim-echo",
        request={"model": "sim-echo", "max_tokens": 500},
        metadata={},
    )

    def asked(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a rule the tenant does not have was asked")

    with monkeypatch.context() as patch:
        patch.setattr(limits_rules, "check_allowed", asked)
        patch.setattr(limits_rules, "cap_output_tokens", asked)
        assert limits_service.Admission(TenantLimits(), "clamp", None, None).admit(job) is job
    with pytest.raises(errors.LimitExceeded):
        only = TenantLimits(allowed_models=("sim-other",))
        limits_service.Admission(only, "clamp", None, None).admit(job)
    capped = limits_service.Admission(TenantLimits(max_output_tokens=64), "clamp", None, None)
    assert capped.admit(job).request["max_tokens"] == 64
