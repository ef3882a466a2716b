"""`jobgate why JOB` against a real server, on both backends: one paragraph per reason a queued
job waits (a schedule, a pause, no worker, a budget, a breaker, a rate limit, a cap, its turn),
saying what holds it and what would move it; and for a job nothing holds."""

from __future__ import annotations

import asyncio
import json
import os

import pytest
from click.testing import CliRunner, Result

from jobgate.cli import cli
from jobgate.config import Settings
from jobgate.domain import waiting
from jobgate.process.runtime import Runtime
from jobgate.storage.protocol import Storage
from jobgate.testing import FakeClock
from tests import waiting_scenarios as held
from tests.api_server import Api

# A word of what each paragraph must say about the way out, beyond the server's sentence.
REMEDIES = {
    "scheduled": "not claimed before then",
    "paused": "jobgate resume",
    "no_worker": "jobgate worker",
    "budget_exhausted": "--daily-token-budget",
    "breaker_open": "probe",
    "rate_limited": "rate limit",
    "tenant_cap": "--max-running",
    "key_cap": "concurrency key",
    "queue": "Nothing holds it back",
}


@pytest.fixture
def runtime(storage: Storage, settings: Settings, clock: FakeClock) -> Runtime:
    return held.limited_runtime(storage, settings, clock)


async def jobgate(api: Api, key: str, *args: str) -> Result:
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("JOBGATE_")}
    env |= {"JOBGATE_URL": api.url, "JOBGATE_API_KEY": key}
    runner = CliRunner()
    return await asyncio.to_thread(runner.invoke, cli, list(args), env=env, catch_exceptions=False)


def test_every_reason_has_a_remedy() -> None:
    assert set(REMEDIES) == set(waiting.REASONS)


@pytest.mark.parametrize("reason", waiting.REASONS)
async def test_why_explains_each_reason_in_one_paragraph(
    api: Api, clock: FakeClock, reason: str
) -> None:
    found = await held.SCENARIOS[reason](api, clock)
    detail = held.steady((await found.tenant.read(found.job_id))["waiting"]["detail"])
    result = await jobgate(api, found.tenant.key, "why", found.job_id)
    assert result.exit_code == 0, result.stderr
    paragraph = held.steady(result.stdout.strip())
    assert "\n" not in paragraph
    assert paragraph.startswith(f"Job {found.job_id} is queued, not claimed yet: ")
    assert detail in paragraph and REMEDIES[reason] in paragraph
    as_json = await jobgate(api, found.tenant.key, "why", found.job_id, "--json")
    shown = json.loads(as_json.stdout)
    assert (shown["id"], shown["status"], shown["waiting"]["reason"]) == (
        found.job_id,
        "queued",
        reason,
    )


@pytest.mark.parametrize("limit", list(held.KEY_SCENARIOS))
async def test_why_names_the_limit_per_key_that_holds_a_job(
    api: Api, clock: FakeClock, limit: str
) -> None:
    found = await held.KEY_SCENARIOS[limit](api, clock)
    result = await jobgate(api, found.tenant.key, "why", found.job_id)
    assert result.exit_code == 0, result.stderr
    paragraph = result.stdout.strip()
    assert "\n" not in paragraph and limit in paragraph and "'user-7'" in paragraph
    assert REMEDIES[found.reason] in paragraph and "(until " in paragraph


async def test_why_says_when_a_timed_wait_ends(api: Api, clock: FakeClock) -> None:
    found = await held.scheduled(api, clock)
    paragraph = (await jobgate(api, found.tenant.key, "why", found.job_id)).stdout
    assert "(until " in paragraph and ", in " in paragraph


async def test_why_of_jobs_nothing_holds(api: Api) -> None:
    acme = await held.tenant(api)
    job_id = await acme.submit()
    first = (await jobgate(api, acme.key, "why", job_id)).stdout.strip()
    assert (
        first
        == f"Job {job_id} is queued and first in its tenant's line: a worker may claim it now."
    )
    await api.runtime.worker().run_once()
    done = (await jobgate(api, acme.key, "why", job_id)).stdout.strip()
    assert done.startswith(f"Job {job_id} is succeeded since ") and "waits for nothing" in done


async def test_why_of_an_unknown_job_is_one_line_and_exit_1(api: Api) -> None:
    acme = await held.tenant(api)
    result = await jobgate(api, acme.key, "why", "job_nothing")
    assert result.exit_code == 1 and "job_nothing" in result.stderr
