"""Provider-native batches whose upstream is a second jobgate: jobgate A's provider `up` (kind
`openai`, `native_batches`) points at jobgate B's `/v1`, with a key of B's tenant, so A's parts
become batches on B (which runs their lines as jobs on `jobgate simulator`). Through the
official `openai` SDK: A's batch comes back as one output file with every custom_id once; B
holds each part once, named by its key in `metadata`; a batches role of A SIGKILLed after a
part's create finds that part on B by its metadata (B's list, paged with `after`) and never
creates it twice (jobgate A on SQLite and on PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import openai
import pytest

from tests.e2e.test_native_batches_sdk import (
    CHAT,
    PRICES,
    STORES,
    create_batch,
    ended,
    file_lines,
    input_file,
    sdk,
    start_simulator,
    store_env,
)
from tests.support.processes import JobgateProcess, ProcessHarness

pytestmark = pytest.mark.e2e
NATIVE, JOBS, PART = 10, 6, 4
PARTS = -(-NATIVE // PART)  # 3
FAST = {"JOBGATE_BATCH_POLL_INTERVAL_S": "0.2"}


@dataclass
class Upstream:
    """Jobgate B: its URL, its default tenant's key, and an SDK client on it."""

    url: str
    key: str
    client: openai.OpenAI


@pytest.fixture
def simulator_url(tmp_path: Path) -> Iterator[str]:
    with ProcessHarness(tmp_path / "simulator") as harness:
        _, base_url = start_simulator(harness)
        yield base_url


@pytest.fixture
def upstream(tmp_path: Path, simulator_url: str) -> Iterator[Upstream]:
    """Jobgate B: every model on the simulator's OpenAI API, as jobs."""
    directory = tmp_path / "b"
    directory.mkdir()
    config = directory / "jobgate.toml"
    config.write_text(
        f'default_provider = "oa"\n[providers.oa]\nkind = "openai"\nbase_url = "{simulator_url}"\n'
    )
    with ProcessHarness(directory, env={**FAST, "JOBGATE_CONFIG": str(config)}) as harness:
        serve = harness.start("serve")
        assert serve.url is not None
        key = harness.default_api_key(serve.url)
        try:
            yield Upstream(serve.url, key, sdk(serve.url, key))
        except BaseException:
            print(harness.logs())
            raise


@pytest.fixture
def gateway(tmp_path: Path, simulator_url: str, upstream: Upstream) -> Iterator[ProcessHarness]:
    """Jobgate A's directory and processes: `up` is B with native batches of `PART` lines,
    `plain` the simulator, as jobs."""
    directory = tmp_path / "a"
    directory.mkdir()
    config = directory / "jobgate.toml"
    config.write_text(
        f'[providers.up]\nkind = "openai"\nbase_url = "{upstream.url}/v1"\n'
        f'api_key_env = "UPSTREAM_JOBGATE_KEY"\nnative_batches = true\n'
        f"batch_max_requests = {PART}\n"
        + PRICES.format(name="up")
        + f'[providers.plain]\nkind = "openai"\nbase_url = "{simulator_url}"\n'
        + PRICES.format(name="plain")
    )
    env = {**FAST, "JOBGATE_CONFIG": str(config), "UPSTREAM_JOBGATE_KEY": upstream.key}
    with ProcessHarness(directory, env=env) as harness:
        try:
            yield harness
        except BaseException:
            print(harness.logs())
            raise


def upstream_parts(upstream: Upstream) -> dict[str, list[str]]:
    """B's batches by the part key in their metadata (the SDK's list, paged by `after`)."""
    found: dict[str, list[str]] = {}
    for batch in upstream.client.batches.list(limit=2):  # small pages: `after` is followed
        key = str((batch.metadata or {}).get("jobgate_part"))
        found.setdefault(key, []).append(batch.status)
    return found


def a_client(gateway: ProcessHarness, serve: JobgateProcess) -> openai.OpenAI:
    assert serve.url is not None
    return sdk(serve.url, gateway.default_api_key(serve.url))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("store", STORES)
def test_a_batch_on_a_second_jobgate_comes_back_as_one_output_file(
    gateway: ProcessHarness, upstream: Upstream, store: str, request: pytest.FixtureRequest
) -> None:
    client = a_client(gateway, gateway.start("serve", env=store_env(store, request)))
    batch_id = create_batch(client, input_file(NATIVE, JOBS, to="up"))
    batch = ended(client, batch_id, timeout_s=60)
    assert batch.status == "completed" and batch.request_counts is not None
    assert (batch.request_counts.total, batch.request_counts.completed) == (16, 16)
    assert batch.error_file_id is None
    output = file_lines(client, batch.output_file_id)
    assert [line["custom_id"] for line in output] == [f"c{n}" for n in range(NATIVE + JOBS)]
    parts = upstream_parts(upstream)
    assert parts == {f"{batch_id}.up.{index}": ["completed"] for index in range(PARTS)}
    for made in upstream.client.batches.list():
        assert made.endpoint == CHAT and made.request_counts is not None
        assert made.request_counts.failed == 0


@pytest.mark.timeout(120)
@pytest.mark.parametrize("store", STORES)
def test_a_killed_batches_role_finds_its_part_on_the_second_jobgate(
    gateway: ProcessHarness, upstream: Upstream, store: str, request: pytest.FixtureRequest
) -> None:
    env = store_env(store, request)
    api = gateway.start("serve", "--roles", "api", env=env)
    client = a_client(gateway, api)
    batch_id = create_batch(client, input_file(NATIVE, JOBS, to="up"))
    doomed = gateway.start(
        "serve",
        "--roles",
        "batches",
        env={**env, "JOBGATE_FAILPOINTS": "provider_batch_created=kill@2"},
        ready=False,
    )
    assert doomed.wait_exit(timeout_s=60) == -9
    assert len(upstream_parts(upstream)) == 2  # the second created, its id not recorded
    gateway.start("serve", "--roles", "batches,worker,reaper", env=env, ready=False)
    batch = ended(client, batch_id, timeout_s=60)
    assert batch.status == "completed" and batch.request_counts is not None
    assert batch.request_counts.completed == NATIVE + JOBS
    output = file_lines(client, batch.output_file_id)
    assert sorted(line["custom_id"] for line in output) == sorted(
        f"c{n}" for n in range(NATIVE + JOBS)
    )
    assert len(output) == NATIVE + JOBS
    parts = upstream_parts(upstream)
    assert parts == {f"{batch_id}.up.{index}": ["completed"] for index in range(PARTS)}
