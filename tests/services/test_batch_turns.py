"""The batches role takes tenants in turns, on both backends: however many live batches one
tenant keeps (waiting for their jobs), another tenant's batch is validated and run in the
next pass, not after them."""

from __future__ import annotations

from typing import Any

from jobgate.process.runtime import Runtime
from jobgate.roles import batch_runner
from jobgate.wire.openai_batches import BatchStatus
from tests.roles.test_batch_runner import make_batch_of

CHAT = "/v1/chat/completions"


def _line(n: int) -> dict[str, Any]:
    body = {"model": "sim-echo", "messages": [{"role": "user", "content": f"n{n}"}]}
    return {"custom_id": f"c{n}", "method": "POST", "url": CHAT, "body": body}


async def test_a_tenants_many_live_batches_do_not_hold_anothers_back(runtime: Runtime) -> None:
    busy = (await runtime.tenants.create("busy")).tenant
    quiet = (await runtime.tenants.create("quiet")).tenant
    for _ in range(batch_runner.BATCHES_PER_PASS + 2):  # more than a pass takes
        await make_batch_of(runtime, busy.id, CHAT, [_line(0), _line(1)])
    runner = runtime.batch_runner()
    for _ in range(2):  # validated, then expanded: their jobs queued, nobody runs them
        await runner.batches_once()
    mine = await make_batch_of(runtime, quiet.id, CHAT, [_line(0)])
    await runner.batches_once()
    validated = await runtime.storage.batch_get(batch_id=mine)
    assert validated is not None and validated.status == BatchStatus.IN_PROGRESS
    await runner.batches_once()  # expanded
    await runtime.worker().run_once(limit=100)  # every job runs: the quiet one's too
    for _ in range(3):
        await runner.batches_once()
    done = await runtime.storage.batch_get(batch_id=mine)
    assert done is not None and done.status == BatchStatus.COMPLETED
