"""The built-in `sim` provider: the simulated model, in process, no network and no key."""

from __future__ import annotations

import asyncio

from jobgate import errors
from jobgate.clock import Clock, SystemClock
from jobgate.providers import simulation
from jobgate.providers.base import JSONObject, ProviderCall, ProviderResult, Usage

CHAT_COMPLETIONS = "/v1/chat/completions"


class SimProvider:
    kind = "sim"
    endpoints = frozenset({CHAT_COMPLETIONS})

    def __init__(self, name: str = "sim", *, clock: Clock | None = None) -> None:
        self.name = name
        self._clock = clock or SystemClock()

    def validate(self, endpoint: str, body: JSONObject) -> None:
        if endpoint not in self.endpoints:
            raise errors.InvalidRequest(
                f"provider {self.name!r} does not serve {endpoint!r} "
                f"(it serves {', '.join(sorted(self.endpoints))})",
                param="endpoint",
                code="unsupported_endpoint",
            )
        simulation.validate_chat(body)
        simulation.directives(body)

    async def call(self, call: ProviderCall) -> ProviderResult:
        plan = simulation.directives(call.body)
        if plan.latency_s:
            await self._clock.sleep(plan.latency_s)
        if plan.fails_on(call.run_count):
            assert plan.fail_with is not None
            if plan.fail_with == "hang":
                await asyncio.Event().wait()  # until cancelled or timed out
            raise simulation.fault(plan.fail_with, plan.retry_after_s)
        body = simulation.chat_completion(call.body, created=int(self._clock.now().timestamp()))
        usage = body["usage"]
        return ProviderResult(
            body=body,
            usage=Usage(usage["prompt_tokens"], usage["completion_tokens"]),
            provider_request_id=body["id"],
        )

    async def aclose(self) -> None:
        return None
