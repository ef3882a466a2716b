"""The built-in `sim` provider: the simulated model (`jobgate.simulator`), in process, no
network and no key.

It answers Chat Completions and Responses bodies (whole or streamed), and with
`mode = "background"` runs Responses jobs in background mode on the same engine the
`jobgate simulator` server uses.
"""

from __future__ import annotations

import asyncio
import dataclasses

import httpx

from jobgate import errors
from jobgate.clock import Clock, SystemClock
from jobgate.providers import calls, error_codes
from jobgate.providers.background import ProviderEvent, ProviderJobRef, Snapshot
from jobgate.providers.base import JSONObject, ProviderCall, ProviderResult, Usage
from jobgate.providers.response_snapshots import response_snapshot
from jobgate.providers.streaming import DeltaSink
from jobgate.simulator import choices, model, parameters, stream_faults, wire
from jobgate.simulator.engine import CancelRefused, SimEngine
from jobgate.wire import openai_requests, sim
from jobgate.wire.content import output_text, split_evenly

CHAT_COMPLETIONS = "/v1/chat/completions"
RESPONSES = "/v1/responses"
_HANGS = frozenset({"hang", stream_faults.STALL})  # a stall where nothing streams: a hang


class SimProvider:
    kind = "sim"
    endpoints = frozenset({CHAT_COMPLETIONS, RESPONSES})
    idempotent_creates = True  # nothing leaves the process: a create never has an unknown fate

    def __init__(
        self,
        name: str = "sim",
        *,
        clock: Clock | None = None,
        background: bool = False,
        engine: SimEngine | None = None,
    ) -> None:
        self.name = name
        self._clock = clock or SystemClock()
        self._background = background
        self.engine = engine or SimEngine(self._clock)

    def validate(self, endpoint: str, body: JSONObject) -> None:
        if endpoint not in self.endpoints:
            raise errors.InvalidRequest(
                f"provider {self.name!r} does not serve {endpoint!r} "
                f"(it serves {', '.join(sorted(self.endpoints))})",
                param="endpoint",
                code="unsupported_endpoint",
            )
        found = parameters.unknown(endpoint, body)
        if found is not None:  # refused as the provider would (simulator.parameters)
            raise errors.InvalidRequest(
                f"body.{found.name}: {found.message}",
                param=f"body.{found.name}",
                code="unknown_parameter",
            )
        if endpoint == CHAT_COMPLETIONS:
            openai_requests.validate_chat(body)
        else:
            problem = openai_requests.validate_responses(body)
            if problem is not None:
                raise errors.InvalidRequest(f"body.{problem}", param="body")
        problem = sim.tool_calls_problem(sim.directives(body), body)
        if problem is not None:
            raise errors.InvalidRequest(f"body.{problem}", param="body.sim.tool_calls")

    def runs_in_background(self, endpoint: str) -> bool:
        return self._background and endpoint == RESPONSES

    async def _faults(self, plan: sim.Directives, call: ProviderCall) -> None:
        """Raise the fault `plan` sets for this call before any answer (a stream fault, in a
        call that does not stream: its HTTP twin), or wait for good (`hang`)."""
        if plan.fails_on(call.run_count) and plan.fail_with in _HANGS:
            await asyncio.Event().wait()  # until cancelled or timed out
        self._raise_fault(plan, call)

    def _raise_fault(self, plan: sim.Directives, call: ProviderCall) -> None:
        """Raise the fault `plan` sets for this call, if any (not `hang`: that one waits)."""
        if plan.fails_on(call.run_count):
            assert plan.fail_with is not None
            if plan.fail_with == "drop":
                raise errors.ProviderOutcomeUnknown(
                    "simulated connection dropped after the request",
                    safe_to_retry=self.idempotent_creates,
                )
            raise model.fault(plan.fail_with, plan.retry_after_s)

    def _chat_result(self, call: ProviderCall) -> ProviderResult:
        body = self._completion(call)
        usage = body["usage"]
        return ProviderResult(
            body=body,
            usage=Usage(usage["prompt_tokens"], usage["completion_tokens"]),
            provider_request_id=body["id"],
        )

    def _completion(self, call: ProviderCall) -> JSONObject:
        completion = model.chat_completion(call.body, created=int(self._clock.now().timestamp()))
        count = sim.directives(call.body).tool_calls
        completion = wire.with_chat_tool_calls(completion, call.body, count)
        return choices.with_choices(completion, call.body)

    async def call(self, call: ProviderCall) -> ProviderResult:
        plan = sim.directives(call.body)
        if call.endpoint == RESPONSES:
            await self._faults(plan, call)
            response_id = self.engine.create_response(call.body, plan, background=False)
            await self._clock.sleep(plan.latency_s)
            await self._until_done(response_id)
            answer = self.engine.response(response_id)
            assert answer is not None
            snapshot = response_snapshot(answer)
            if snapshot.result is None:
                raise snapshot.error or errors.ProviderFatal(
                    f"the response ended {snapshot.status}", code=f"response_{snapshot.status}"
                )
            return snapshot.result
        if plan.latency_s:
            await self._clock.sleep(plan.latency_s)
        if plan.fails_on(call.run_count):
            await self._faults(plan, call)
        return self._chat_result(call)

    def streams(self, endpoint: str) -> bool:
        return endpoint in self.endpoints

    def prefills(self, endpoint: str) -> bool:
        """A trailing assistant message (or Responses input item) is continued
        (simulator.model.continued)."""
        return endpoint in self.endpoints

    async def stream(self, call: ProviderCall, on_delta: DeltaSink) -> ProviderResult:
        """`call`, streamed (live output streaming): the answer arrives as `sim.chunks` deltas
        spread evenly over `sim.latency_s` (one `latency_s / chunks` sleep before each), then
        the same whole answer `call` gives."""
        plan = sim.directives(call.body)
        mid_stream = plan.fail_with if plan.fail_with in sim.STREAM_FAULTS else None
        if mid_stream is not None and plan.fails_on(call.run_count):
            plan = dataclasses.replace(plan, fail_with=None)  # reported halfway, below
        else:
            mid_stream = None
        await self._faults(plan, call)
        clock = self._clock
        if call.endpoint == CHAT_COMPLETIONS:
            body = self._completion(call)
            text = output_text(body)
        else:
            response_id = self.engine.create_response(call.body, plan, background=False)
            preview = wire.response_object(
                call.body,
                response_id=response_id,
                created_at=0,
                status=_final_status(plan),
                tool_calls=plan.tool_calls,
            )
            text = output_text(preview)
        pause_s = plan.latency_s / plan.chunks
        for index, piece in enumerate(split_evenly(text, plan.chunks)):
            if mid_stream is not None and index == plan.cut_index(plan.chunks):
                await self._stream_fault(mid_stream, plan, call)
            if pause_s:
                await clock.sleep(pause_s)
            if piece:
                await on_delta(piece)
        if call.endpoint == CHAT_COMPLETIONS:
            usage = body["usage"]
            return ProviderResult(
                body=body,
                usage=Usage(usage["prompt_tokens"], usage["completion_tokens"]),
                provider_request_id=body["id"],
            )
        await self._until_done(response_id)
        answer = self.engine.response(response_id)
        assert answer is not None
        snapshot = response_snapshot(answer)
        if snapshot.result is None:
            raise snapshot.error or errors.ProviderFatal(
                f"the response ended {snapshot.status}", code=f"response_{snapshot.status}"
            )
        return snapshot.result

    async def _stream_fault(self, fault: str, plan: sim.Directives, call: ProviderCall) -> None:
        """Report `fault` as the provider does inside its stream, classified as the adapters
        classify it (providers.error_codes); a stall is silence for the call's stall timeout,
        then the adapters' `stream_stalled`."""
        if fault == stream_faults.STALL:
            if call.stall_timeout_s is None:
                await asyncio.Event().wait()  # until cancelled or timed out
            await self._clock.sleep(call.stall_timeout_s or 0.0)
            raise errors.ProviderRetryable(
                f"the provider's stream sent nothing for {call.stall_timeout_s:g} s",
                code=calls.STREAM_STALLED,
            )
        model_name = call.model or "sim-echo"
        if call.endpoint == CHAT_COMPLETIONS:
            error = stream_faults.chat_error(fault, model_name, plan.retry_after_s)["error"]
        else:
            error = stream_faults.responses_error(fault, model_name, plan.retry_after_s)
            error = {"code": error["code"], "message": error["message"]}
        raise error_codes.stream_error(
            error,
            response_headers=httpx.Headers(),
            now=self._clock.now(),
            default_retry_after_s=1.0,
        )

    async def _until_done(self, response_id: str) -> None:
        """Answer a foreground response once the engine holds it terminal. The sleeps that
        pace it add up to its latency on the event loop's (monotonic) clock while the engine
        judges by the wall clock: the two may disagree by a little, and a response read a
        moment early would be failed as `in_progress`. One wait only: an engine on a clock this
        provider's sleeps do not move (a test's) is answered as it stands after it."""
        left_s = self.engine.seconds_until_done(response_id)
        if left_s > 0:
            await self._clock.sleep(left_s)

    # -- background mode, on the shared engine -------------------------------------------------

    async def create(self, call: ProviderCall) -> Snapshot:
        plan = sim.directives(call.body)
        await self._faults(plan, call)
        body = {k: v for k, v in call.body.items() if k != "sim"}
        body["metadata"] = {**(body.get("metadata") or {}), "jobgate_job_id": call.job_id}
        response_id = self.engine.create_response(body, plan, background=True)
        answer = self.engine.response(response_id, as_created=True)
        assert answer is not None
        return response_snapshot(answer)

    async def retrieve(self, ref: ProviderJobRef) -> Snapshot:
        answer = self.engine.response(ref.provider_job_id)
        if answer is None:
            raise errors.ProviderFatal(
                f"no response {ref.provider_job_id}", code="not_found", status_code=404
            )
        return response_snapshot(answer)

    async def fetch_result(self, ref: ProviderJobRef, snapshot: Snapshot) -> ProviderResult:
        if snapshot.result is None:
            raise errors.ProviderFatal(f"the response ended {snapshot.status}")
        return snapshot.result

    async def cancel(self, ref: ProviderJobRef) -> Snapshot:
        plan = self.engine.response_plan(ref.provider_job_id)
        if plan is not None and plan.cancel == "unsupported":
            raise errors.ProviderCancelUnsupported(f"provider {self.name!r} cannot cancel")
        try:
            answer = self.engine.cancel_response(ref.provider_job_id)
        except CancelRefused as exc:
            # As OpenAI answers it (400), unconverted: the reconciler must cope on its own.
            raise errors.ProviderFatal(str(exc), code="invalid_request", status_code=400) from exc
        if answer is None:
            raise errors.ProviderFatal(
                f"no response {ref.provider_job_id}", code="not_found", status_code=404
            )
        return response_snapshot(answer)

    def webhook_event(self, payload: JSONObject) -> ProviderEvent | None:
        return None  # in process there is nobody to send webhooks: the reconciler polls

    async def aclose(self) -> None:
        return None


def _final_status(plan: sim.Directives) -> str:
    return "incomplete" if plan.outcome == "incomplete" else "completed"
