"""The in-process simulator, streamed: the answer arrives as `sim.chunks` deltas spread evenly
over `sim.latency_s` (one `latency_s / chunks` sleep before each), then the same whole answer
`SimProvider.call` gives."""

from __future__ import annotations

from typing import TYPE_CHECKING

from jobgate import errors
from jobgate.providers import sim_wire, simulation
from jobgate.providers.base import ProviderCall, ProviderResult, Usage
from jobgate.providers.openai import response_snapshot
from jobgate.providers.streaming import DeltaSink, output_text, split_evenly

if TYPE_CHECKING:
    from jobgate.providers.sim import SimProvider

CHAT_COMPLETIONS = "/v1/chat/completions"


async def stream(sim: SimProvider, call: ProviderCall, on_delta: DeltaSink) -> ProviderResult:
    plan = simulation.directives(call.body)
    await sim._faults(plan, call)
    clock = sim._clock
    if call.endpoint == CHAT_COMPLETIONS:
        body = simulation.chat_completion(call.body, created=int(clock.now().timestamp()))
        text = output_text(body)
    else:
        response_id = sim.engine.create_response(call.body, plan, background=False)
        preview = sim_wire.response_object(
            call.body, response_id=response_id, created_at=0, status=_final_status(plan)
        )
        text = output_text(preview)
    pause_s = plan.latency_s / plan.chunks
    for piece in split_evenly(text, plan.chunks):
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
    answer = sim.engine.response(response_id)
    assert answer is not None
    snapshot = response_snapshot(answer)
    if snapshot.result is None:
        raise snapshot.error or errors.ProviderFatal(
            f"the response ended {snapshot.status}", code=f"response_{snapshot.status}"
        )
    return snapshot.result


def _final_status(plan: simulation.Directives) -> str:
    return "incomplete" if plan.outcome == "incomplete" else "completed"
