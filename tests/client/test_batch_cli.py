"""`jobgate batch` against a real `jobgate serve` process (every role, the batches one too)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from jobgate.cli import batch as batch_cli
from jobgate.cli import cli
from tests.client.server import JobgateServer

pytestmark = pytest.mark.e2e


def invoke(served: JobgateServer, *args: str) -> Result:
    env = {"JOBGATE_URL": served.url, "JOBGATE_API_KEY": served.api_key}
    return CliRunner().invoke(cli, ["batch", *args], env=env, catch_exceptions=False)


def write_input(path: Path, count: int, *, failing: int = 0) -> None:
    with path.open("w") as sink:
        for i in range(count):
            body: dict[str, object] = {
                "model": "sim-echo", "messages": [{"role": "user", "content": f"n{i}"}]
            }  # fmt: skip
            if i < failing:
                body["sim"] = {"fail_with": "invalid_request"}
            line = {"custom_id": f"c{i}", "method": "POST", "url": "/v1/chat/completions",
                    "body": body}  # fmt: skip
            sink.write(json.dumps(line) + "\n")


def test_submit_status_results(
    served: JobgateServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(batch_cli, "POLL_S", 0.1)
    source = tmp_path / "in.jsonl"
    write_input(source, 12, failing=2)
    submitted = invoke(served, "submit", str(source), "--metadata", "run=cli", "--json")
    assert submitted.exit_code == 0  # completed, with two failed lines in the error file
    final = json.loads(submitted.stdout.strip().splitlines()[-1])
    assert final["status"] == "completed" and final["metadata"] == {"run": "cli"}
    assert final["request_counts"] == {"total": 12, "completed": 10, "failed": 2}
    status = invoke(served, "status", final["id"])
    assert status.exit_code == 0 and "10 completed, 2 failed of 12" in status.stdout
    out = tmp_path / "out.jsonl"
    results = invoke(served, "results", final["id"], "-o", str(out))
    assert results.exit_code == 0
    lines = [json.loads(raw) for raw in out.read_text().splitlines()]
    assert sorted(line["custom_id"] for line in lines) == sorted(f"c{i}" for i in range(2, 12))
    failed = [json.loads(raw) for raw in (tmp_path / "out.errors.jsonl").read_text().splitlines()]
    assert sorted(line["custom_id"] for line in failed) == ["c0", "c1"]
    cancelled = invoke(served, "cancel", final["id"])
    assert cancelled.exit_code == 1 and "cannot cancel" in cancelled.output


def test_no_wait_then_cancel(served: JobgateServer, tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    write_input(source, 3)
    submitted = invoke(served, "submit", str(source), "--no-wait", "--json")
    assert submitted.exit_code == 0
    created = json.loads(submitted.stdout)
    cancelled = invoke(served, "cancel", created["id"], "--json")
    # It may have finished already: either it is being cancelled or the cancel is refused.
    if cancelled.exit_code == 0:
        assert json.loads(cancelled.stdout)["status"] in ("cancelling", "finalizing", "cancelled")
    else:
        assert "cannot cancel" in cancelled.output


def test_unknown_batch_and_bad_file(served: JobgateServer, tmp_path: Path) -> None:
    assert invoke(served, "status", "batch_nope").exit_code == 1
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"custom_id": "a", "method": "POST", "url": "/v1/chat/completions"}\n')
    refused = invoke(served, "submit", str(bad))
    assert refused.exit_code == 1 and "line 1" in refused.output


def test_the_python_examples_of_docs_batches_run(served: JobgateServer, tmp_path: Path) -> None:
    doc = Path(__file__).resolve().parents[2] / "docs" / "batches.md"
    examples = re.findall(r"```python\n(.*?)```", doc.read_text(), flags=re.DOTALL)
    assert len(examples) == 2
    outputs = []
    for example in examples:
        # The docs address the README's `jobgate serve` on its documented port and the key it
        # saved; here the same code runs against this test's server.
        example = example.replace(
            'credentials.saved_key("http://127.0.0.1:8000")', repr(served.api_key)
        ).replace("http://127.0.0.1:8000", served.url)
        result = subprocess.run(
            [sys.executable, "-c", example],
            env=served.env(JOBGATE_URL=served.url, JOBGATE_API_KEY=served.api_key),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr
        outputs.append(result.stdout.splitlines())
    (first,) = outputs[0]  # the refusal's code: invalid_request, or model_not_found (DESIGN 9)
    assert first.startswith("2500 stored; 1 refused: ")
    assert outputs[1][0] == "completed 3 0"
    assert outputs[1][1:] == [f"q{i} echo: question {i}" for i in range(3)]


def test_an_operator_lists_and_cancels_any_tenants_batch(
    served: JobgateServer, tmp_path: Path
) -> None:
    source = tmp_path / "in.jsonl"
    write_input(source, 3)
    submitted = invoke(served, "submit", str(source), "--no-wait", "--json")
    created = json.loads(submitted.stdout)
    # No API key: --operator takes the operator key `jobgate serve` saved for the server.
    env = {**served.env(JOBGATE_URL=served.url), "JOBGATE_API_KEY": ""}

    def operator(*args: str) -> Result:
        return CliRunner().invoke(cli, ["batch", *args], env=env, catch_exceptions=False)

    listed = operator("list", "--operator", "--tenant", "default", "--json")
    assert listed.exit_code == 0, listed.output
    rows = [json.loads(raw) for raw in listed.stdout.splitlines()]
    assert created["id"] in [row["id"] for row in rows]
    assert {row["tenant"] for row in rows} == {"default"}
    plain = operator("list", "--operator")
    assert plain.exit_code == 0 and f"default  {created['id']}" in plain.stdout
    cancelled = operator("cancel", created["id"], "--operator", "--json")
    if cancelled.exit_code == 0:  # it may have finished already
        assert json.loads(cancelled.stdout)["status"] in ("cancelling", "finalizing", "cancelled")
    else:
        assert "cannot cancel" in cancelled.output
    unknown = operator("list", "--operator", "--tenant", "nobody", "--json")
    assert unknown.exit_code == 0 and unknown.stdout == ""
