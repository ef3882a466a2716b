"""Provider-native batches end to end, through the official `openai` SDK against `jobgate serve`
and `jobgate simulator` as separate processes: a batch whose lines go half to a provider with
native batches (split into parts of 4 lines) and half to one without comes back as one output
file with every custom_id once, and so does one over OpenAI's Batch API, Anthropic's Message
Batches and jobs at once; a `serve --roles batches` SIGKILLed after a part's intent or after
its create, then started again, makes exactly one provider batch per part (OpenAI's or
Anthropic's, on both stores); a cancel reaches the provider's batches."""

from __future__ import annotations

import io
import json
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletion

from tests.providers.sdk import openai_strict
from tests.support.processes import JobgateProcess, ProcessHarness, wait_until

pytestmark = pytest.mark.e2e
NATIVE, JOBS, PART = 10, 6, 4
PARTS = -(-NATIVE // PART)  # 3
CHAT: Literal["/v1/chat/completions"] = "/v1/chat/completions"
PRICES = '[providers.{name}.prices]\n"*" = {{ input_per_mtok = 2.0, output_per_mtok = 8.0 }}\n'


def start_simulator(harness: ProcessHarness) -> tuple[JobgateProcess, str]:
    process = harness.process("simulator", "--port", "0").start()

    def listening() -> str | None:
        match = re.search(r"OpenAI base_url (http://\S+/v1)", process.stdout())
        if not process.alive:
            raise AssertionError(process.tail())
        return match.group(1) if match else None

    return process, wait_until(listening, timeout_s=60, what="the simulator")


def write_config(
    tmp_path: Path, base_url: str, *, latency_s: float | None = None, part: int = PART
) -> None:
    """`oa`: native batches of at most `part` lines; `an`: the same simulator's Anthropic API,
    Message Batches of at most `part` requests; `plain`: the same simulator, as jobs."""
    headers = ""
    if latency_s is not None:  # the simulator's batches take this long to run
        headers = f'headers = {{ "x-jobgate-sim" = \'{{"latency_s": {latency_s}}}\' }}\n'
    (tmp_path / "jobgate.toml").write_text(
        f'[providers.oa]\nkind = "openai"\nbase_url = "{base_url}"\n'
        f"native_batches = true\nbatch_max_requests = {part}\n{headers}"
        + PRICES.format(name="oa")
        + f'[providers.an]\nkind = "anthropic"\nbase_url = "{base_url.removesuffix("/v1")}"\n'
        f"native_batches = true\nbatch_max_requests = {part}\n"
        + PRICES.format(name="an")
        + f'[providers.plain]\nkind = "openai"\nbase_url = "{base_url}"\n'
        + PRICES.format(name="plain")
    )


def input_file(native: int = NATIVE, jobs: int = JOBS, *, to: str = "oa") -> bytes:
    """`native` lines for `to` interleaved with `jobs` for `plain`, all of one model."""
    kinds: list[str] = []
    while native or jobs:
        if native:
            kinds.append(to)
            native -= 1
        if jobs:
            kinds.append("plain")
            jobs -= 1
    return lines_to(kinds)


def lines_to(kinds: list[str]) -> bytes:
    """A chat line for each provider of `kinds` in turn (custom_id `c<n>`), of one model."""
    lines = [
        {
            "custom_id": f"c{n}",
            "method": "POST",
            "url": CHAT,
            "body": {
                "model": f"{provider}/gpt-4.1-mini",
                "messages": [{"role": "user", "content": f"line {n}"}],
            },
        }
        for n, provider in enumerate(kinds)
    ]
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def sdk(url: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{url}/v1", api_key=key, max_retries=0, _strict_response_validation=True
    )


def create_batch(client: openai.OpenAI, data: bytes) -> str:
    uploaded = client.files.create(file=("in.jsonl", io.BytesIO(data)), purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint=CHAT, completion_window="24h")
    assert batch.status == "validating"
    return batch.id


def ended(client: openai.OpenAI, batch_id: str, *, timeout_s: float = 30) -> Any:
    def done() -> Any:
        batch = client.batches.retrieve(batch_id)
        return batch if batch.status in ("completed", "cancelled", "expired", "failed") else None

    return wait_until(done, timeout_s=timeout_s, interval_s=0.2, what=f"{batch_id} to end")


def file_lines(client: openai.OpenAI, file_id: str | None) -> list[dict[str, Any]]:
    if file_id is None:
        return []
    text = client.files.content(file_id).text
    return [json.loads(raw) for raw in text.splitlines() if raw.strip()]


def provider_batches(base_url: str) -> list[dict[str, Any]]:
    """Every batch the simulator holds, as its own list answers them."""
    found: list[dict[str, Any]] = []
    after = None
    while True:
        params: dict[str, Any] = {"limit": 100} | ({"after": after} if after else {})
        page = httpx.get(f"{base_url}/batches", params=params, timeout=10).json()
        found.extend(page["data"])
        if not page["has_more"]:
            return found
        after = page["last_id"]


def message_batches(base_url: str) -> list[str]:
    """The Message Batches the simulator made, as its state tells them."""
    root = base_url.removesuffix("/v1")
    state = httpx.get(f"{root}/_simulator/state", timeout=10).json()
    return [made for made in state["created"] if made.startswith("msgbatch_")]


def parts_by_key(base_url: str) -> dict[str, int]:
    counted: dict[str, int] = {}
    for batch in provider_batches(base_url):
        key = str((batch.get("metadata") or {}).get("jobgate_part"))
        counted[key] = counted.get(key, 0) + 1
    return counted


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[ProcessHarness]:
    env = {"JOBGATE_BATCH_POLL_INTERVAL_S": "0.2", "JOBGATE_CONFIG": str(tmp_path / "jobgate.toml")}
    with ProcessHarness(tmp_path, env=env) as running:
        try:
            yield running
        except BaseException:
            print(running.logs())
            raise


@pytest.mark.timeout(120)
@pytest.mark.parametrize("store", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_batch_over_a_native_and_a_job_provider_has_one_output_file(
    harness: ProcessHarness, tmp_path: Path, store: str, request: pytest.FixtureRequest
) -> None:
    _, base_url = start_simulator(harness)
    write_config(tmp_path, base_url)
    env = {}
    if store == "postgres":
        env["JOBGATE_DATABASE_URL"] = str(request.getfixturevalue("pg_dsn"))
    serve = harness.start("serve", env=env)
    assert serve.url is not None
    key = harness.default_api_key(serve.url)
    client = sdk(serve.url, key)
    batch_id = create_batch(client, input_file())
    batch = ended(client, batch_id)
    assert batch.status == "completed"
    assert batch.request_counts is not None
    assert (batch.request_counts.total, batch.request_counts.completed) == (16, 16)
    output = file_lines(client, batch.output_file_id)
    assert [line["custom_id"] for line in output] == [f"c{n}" for n in range(NATIVE + JOBS)]
    assert batch.error_file_id is None
    # Every part made once at the provider, each with the lines of its part.
    counted = parts_by_key(base_url)
    assert counted == {f"{batch_id}.oa.{index}": 1 for index in range(PARTS)}
    view = httpx.get(
        f"{serve.url}/v1/batches/{batch_id}", headers={"Authorization": f"Bearer {key}"}
    ).json()
    assert [part["status"] for part in view["provider_batches"]] == ["completed"] * PARTS
    assert sum(part["request_counts"]["total"] for part in view["provider_batches"]) == NATIVE
    assert not serve.log_lines_matching('"level":"error"'), serve.tail()


def made_parts(base_url: str, provider: str) -> int:
    """How many provider batches the simulator made for `provider` (`oa`: OpenAI's, each
    named by its part's key, none twice; `an`: Anthropic's Message Batches)."""
    if provider == "an":
        return len(message_batches(base_url))
    counted = parts_by_key(base_url)
    assert set(counted.values()) <= {1}, counted
    return len(counted)


def store_env(store: str, request: pytest.FixtureRequest) -> dict[str, str]:
    if store == "postgres":
        return {"JOBGATE_DATABASE_URL": str(request.getfixturevalue("pg_dsn"))}
    return {}


STORES = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("store", STORES)
@pytest.mark.parametrize("provider", ["oa", "an"], ids=["openai", "anthropic"])
@pytest.mark.parametrize("point", ["provider_batch_intended", "provider_batch_created"])
def test_a_killed_batches_role_makes_each_provider_batch_once(
    harness: ProcessHarness,
    tmp_path: Path,
    point: str,
    provider: str,
    store: str,
    request: pytest.FixtureRequest,
) -> None:
    _, base_url = start_simulator(harness)
    write_config(tmp_path, base_url)
    env = store_env(store, request)
    api = harness.start("serve", "--roles", "api", env=env)
    assert api.url is not None
    client = sdk(api.url, harness.default_api_key(api.url))
    batch_id = create_batch(client, input_file(to=provider))
    # The batches role dies at the second part: its intent written (nothing sent), or its
    # provider batch created (its id not recorded).
    doomed = harness.start(
        "serve",
        "--roles",
        "batches",
        env={**env, "JOBGATE_FAILPOINTS": f"{point}=kill@2"},
        ready=False,
    )
    assert doomed.wait_exit(timeout_s=60) == -9
    assert made_parts(base_url, provider) == (1 if point == "provider_batch_intended" else 2)
    harness.start("serve", "--roles", "batches,worker,reaper", env=env, ready=False)
    batch = ended(client, batch_id)
    assert batch.status == "completed" and batch.request_counts is not None
    assert batch.request_counts.completed == NATIVE + JOBS
    output = file_lines(client, batch.output_file_id)
    assert sorted(line["custom_id"] for line in output) == sorted(
        f"c{n}" for n in range(NATIVE + JOBS)
    )
    assert len(output) == NATIVE + JOBS
    assert made_parts(base_url, provider) == PARTS
    if provider == "oa":
        assert parts_by_key(base_url) == {f"{batch_id}.oa.{index}": 1 for index in range(PARTS)}
    view = httpx.get(
        f"{api.url}/v1/batches/{batch_id}",
        headers={"Authorization": f"Bearer {harness.default_api_key(api.url)}"},
    ).json()
    assert sorted(part["id"] for part in view["provider_batches"]) == sorted(
        message_batches(base_url) if provider == "an" else parts_ids(base_url)
    )


def parts_ids(base_url: str) -> list[str]:
    return [str(batch["id"]) for batch in provider_batches(base_url)]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("store", STORES)
def test_a_batch_over_openai_anthropic_and_jobs_has_one_output_file(
    harness: ProcessHarness, tmp_path: Path, store: str, request: pytest.FixtureRequest
) -> None:
    """Chat lines for OpenAI's Batch API, Anthropic's Message Batches and a provider without
    native batches, interleaved: one output file, every custom_id once, in input order; each
    answer a `chat.completion` as the SDK's type has it."""
    _, base_url = start_simulator(harness)
    write_config(tmp_path, base_url)
    serve = harness.start("serve", env=store_env(store, request))
    assert serve.url is not None
    key = harness.default_api_key(serve.url)
    client = sdk(serve.url, key)
    kinds = ["oa", "an", "plain"] * 6  # 6 lines each: 2 parts at OpenAI, 2 at Anthropic
    batch_id = create_batch(client, lines_to(kinds))
    batch = ended(client, batch_id)
    assert batch.status == "completed" and batch.request_counts is not None
    assert (batch.request_counts.total, batch.request_counts.completed) == (18, 18)
    assert batch.error_file_id is None
    output = file_lines(client, batch.output_file_id)
    assert [line["custom_id"] for line in output] == [f"c{n}" for n in range(len(kinds))]
    for line in output:
        assert line["response"]["status_code"] == 200
        completion = openai_strict(ChatCompletion, line["response"]["body"])
        assert completion.choices[0].message.content
    assert len(message_batches(base_url)) == 2
    assert parts_by_key(base_url) == {f"{batch_id}.oa.{index}": 1 for index in range(2)}
    view = httpx.get(
        f"{serve.url}/v1/batches/{batch_id}", headers={"Authorization": f"Bearer {key}"}
    ).json()
    shown = sorted((part["provider"], part["status"]) for part in view["provider_batches"])
    assert shown == [("an", "completed")] * 2 + [("oa", "completed")] * 2
    assert not serve.log_lines_matching('"level":"error"'), serve.tail()


@pytest.mark.timeout(120)
def test_a_cancel_reaches_the_provider_batches(harness: ProcessHarness, tmp_path: Path) -> None:
    _, base_url = start_simulator(harness)
    write_config(tmp_path, base_url, latency_s=20)  # validated after 2 s, lines from 6 s on
    serve = harness.start("serve")
    assert serve.url is not None
    client = sdk(serve.url, harness.default_api_key(serve.url))
    batch_id = create_batch(client, input_file(native=6, jobs=0))
    wait_until(
        lambda: len(parts_by_key(base_url)) == 2, timeout_s=30, what="both parts at the provider"
    )
    cancelling = client.batches.cancel(batch_id)
    assert cancelling.status == "cancelling"
    batch = ended(client, batch_id)
    assert batch.status == "cancelled" and batch.request_counts is not None
    assert batch.request_counts.completed == 0
    statuses = {b["metadata"]["jobgate_part"]: b["status"] for b in provider_batches(base_url)}
    assert statuses == {f"{batch_id}.oa.0": "cancelled", f"{batch_id}.oa.1": "cancelled"}
    failures = file_lines(client, batch.error_file_id)
    assert [line["custom_id"] for line in failures] == [f"c{n}" for n in range(6)]
    assert {line["error"]["code"] for line in failures} == {"batch_cancelled"}


COST_LINES = 100


def run_and_price(harness: ProcessHarness, base_url: str, native: bool) -> dict[str, Any]:
    """COST_LINES requests to `oa` in one batch, natively or as jobs: the batch's usage and
    the default tenant's spend as `jobgate tenants show` prices it from the ledger."""
    config = harness.directory / "jobgate.toml"
    write_config(harness.directory, base_url)
    if not native:
        config.write_text(config.read_text().replace("native_batches = true", ""))
    serve = harness.start("serve")
    assert serve.url is not None
    client = sdk(serve.url, harness.default_api_key(serve.url))
    batch = ended(client, create_batch(client, input_file(native=COST_LINES, jobs=0)))
    assert batch.status == "completed" and batch.usage is not None
    shown = json.loads(harness.run("tenants", "show", "default", "--json").stdout)
    with sqlite3.connect(harness.directory / "jobgate.db") as db:
        ledger = db.execute(
            "SELECT kind, count(*), sum(input_tokens), sum(output_tokens) FROM usage_ledger"
            " GROUP BY kind"
        ).fetchall()
    return {
        "input_tokens": batch.usage.input_tokens,
        "output_tokens": batch.usage.output_tokens,
        "spend_today_usd": shown["spend_today_usd"],
        "ledger": ledger,
    }


@pytest.mark.timeout(180)
def test_native_lines_cost_the_batch_price(tmp_path: Path) -> None:
    """The figures in docs/batches.md ("Provider-native batches"): the same batch through the
    same provider, sent natively and as jobs (`-s` prints them)."""
    env = {"JOBGATE_BATCH_POLL_INTERVAL_S": "0.2"}
    figures = {}
    with ProcessHarness(tmp_path / "simulator") as outer:
        _, base_url = start_simulator(outer)
        for native in (True, False):
            directory = tmp_path / ("native" if native else "jobs")
            run_env = {**env, "JOBGATE_CONFIG": str(directory / "jobgate.toml")}
            with ProcessHarness(directory, env=run_env) as harness:
                figures[native] = run_and_price(harness, base_url, native)
    print(f"native batches: {figures[True]}\nas jobs:        {figures[False]}")
    assert figures[True]["input_tokens"] == figures[False]["input_tokens"] > 0
    assert figures[True]["output_tokens"] == figures[False]["output_tokens"] > 0
    assert figures[True]["spend_today_usd"] * 2 == pytest.approx(figures[False]["spend_today_usd"])
    tokens = (figures[True]["input_tokens"], figures[True]["output_tokens"])
    assert figures[True]["ledger"] == [("batch", -(-COST_LINES // PART), *tokens)]
    assert figures[False]["ledger"] == [("completion", COST_LINES, *tokens)]


BIG_NATIVE, BIG_JOBS, BIG_PART = 5_000, 5_000, 2_000


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_ten_thousand_line_batch_over_two_providers(
    harness: ProcessHarness, tmp_path: Path
) -> None:
    """The issue's scale: 10,000 lines, half in provider batches of 2,000, half as jobs."""
    _, base_url = start_simulator(harness)
    write_config(tmp_path, base_url, part=BIG_PART)
    serve = harness.start("serve")
    assert serve.url is not None
    client = sdk(serve.url, harness.default_api_key(serve.url))
    batch_id = create_batch(client, input_file(native=BIG_NATIVE, jobs=BIG_JOBS))
    batch = ended(client, batch_id, timeout_s=540)
    assert batch.status == "completed" and batch.request_counts is not None
    assert batch.request_counts.completed == BIG_NATIVE + BIG_JOBS
    output = file_lines(client, batch.output_file_id)
    assert [line["custom_id"] for line in output] == [f"c{n}" for n in range(BIG_NATIVE + BIG_JOBS)]
    parts = -(-BIG_NATIVE // BIG_PART)
    assert parts_by_key(base_url) == {f"{batch_id}.oa.{index}": 1 for index in range(parts)}
