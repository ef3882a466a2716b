"""A provider that plays a script: succeed, fail with a classified error, or block until
released. It records every call it receives."""

from __future__ import annotations

import asyncio
import dataclasses
from collections import deque
from typing import Any

from jobgate import errors
from jobgate.providers.base import JSONObject, ProviderCall, ProviderResult, Usage


@dataclasses.dataclass
class Succeed:
    body: JSONObject = dataclasses.field(default_factory=lambda: {"ok": True})
    usage: Usage = dataclasses.field(default_factory=lambda: Usage(10, 5))


@dataclasses.dataclass
class Fail:
    error: errors.ProviderError


@dataclasses.dataclass
class Block:
    """Wait until `release` is set (then succeed with `then`), or until cancelled."""

    release: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    then: Succeed | Fail = dataclasses.field(default_factory=Succeed)
    started: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    cancelled: bool = False


Step = Succeed | Fail | Block


class ScriptedProvider:
    """Plays `script` in order, one step per call; after the script, `default` forever."""

    kind = "scripted"

    def __init__(
        self,
        name: str = "scripted",
        script: list[Step] | None = None,
        default: Step | None = None,
    ) -> None:
        self.name = name
        self.script: deque[Step] = deque(script or [])
        self.default = default or Succeed()
        self.calls: list[ProviderCall] = []

    def validate(self, endpoint: str, body: JSONObject) -> None:
        if not isinstance(body, dict):
            raise errors.InvalidRequest("body must be an object", param="body")

    async def call(self, call: ProviderCall) -> ProviderResult:
        self.calls.append(call)
        step = self.script.popleft() if self.script else self.default
        if isinstance(step, Block):
            step.started.set()
            try:
                await step.release.wait()
            except asyncio.CancelledError:
                step.cancelled = True
                raise
            step = step.then
        if isinstance(step, Fail):
            raise step.error
        return ProviderResult(body=dict(step.body), usage=step.usage)

    async def aclose(self) -> None:
        return None

    def answered(self) -> list[Any]:
        return [call.job_id for call in self.calls]
