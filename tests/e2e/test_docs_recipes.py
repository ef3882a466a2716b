"""Every process recipe of the docs (a block marked `<!-- run: postgres -->`: roles started with
`&` against PostgreSQL) runs as printed, its `postgresql://…` URL replaced by a fresh
database's, in a reader's clean environment with its own network: then a job and an OpenAI
batch must go through the processes it started, which are stopped after. A recipe that leaves
a role out (the batches of a batch, the webhooks of a job) fails here."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.e2e import doc_blocks
from tests.e2e.reader import Reader
from tests.transports import brokers

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]
RECIPE_TIMEOUT_S = 240
_POSTGRES_URL = re.compile(r"postgresql://[^\s'\"]+")
_LOCAL_PORT = re.compile(r"(?:127\.0\.0\.1|localhost):(\d+)")
# What the reader does next, in the recipe's shell (so its `&` processes are this shell's
# jobs): wait for the API, create a tenant, send a job and a batch through, stop every process.
CHECK = r"""
until curl -s -o /dev/null localhost:8000/healthz; do sleep 0.2; done
KEY=$(jobgate tenants create recipe --json \
      | python3 -c 'import json,sys; print(json.load(sys.stdin)["api_key"])')
python3 - "$KEY" <<'PY'
import json, sys, time
import openai
from jobgate.client import Client

key = sys.argv[1]
hello = {"model": "sim-echo", "messages": [{"role": "user", "content": "hello"}]}
with Client("http://127.0.0.1:8000", key) as client:
    job = client.wait(client.submit("/v1/chat/completions", hello).id, timeout_s=120)
    print("job", job.status)
sdk = openai.OpenAI(base_url="http://127.0.0.1:8000/v1", api_key=key)
line = {"custom_id": "r1", "method": "POST", "url": "/v1/chat/completions", "body": hello}
upload = sdk.files.create(file=("r.jsonl", json.dumps(line).encode() + b"\n"), purpose="batch")
batch = sdk.batches.create(
    input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
)
deadline = time.monotonic() + 120
while batch.status not in ("completed", "failed", "expired", "cancelled"):
    if time.monotonic() > deadline:
        sys.exit(f"batch still {batch.status} after 120 s")
    time.sleep(0.5)
    batch = sdk.batches.retrieve(batch.id)
print("batch", batch.status, batch.request_counts.completed)
PY
kill $(jobs -p)
wait
"""
RECIPES = [
    (block, code)
    for document in doc_blocks.reading_order()
    for block, code in doc_blocks.runnable(doc_blocks.parse(document))
    if "postgres" in block.options
]


def test_the_scale_out_recipes_are_marked_to_run() -> None:
    where = {block.where.split(":")[0] for block, _ in RECIPES}
    assert {"README.md", "docs/transports.md"} <= where


@pytest.mark.timeout(RECIPE_TIMEOUT_S + 60)
@pytest.mark.parametrize("recipe", RECIPES, ids=[block.where for block, _ in RECIPES])
def test_a_process_recipe_runs_as_printed_postgres(
    recipe: tuple[doc_blocks.Block, str], pg_dsn: str, tmp_path: Path
) -> None:
    block, code = recipe
    database = urlsplit(pg_dsn)
    assert database.hostname is not None and database.port is not None
    user = database.netloc.rsplit("@", 1)[0]
    inside = pg_dsn.replace(database.netloc, f"{user}@127.0.0.1:{database.port}", 1)
    ports = {int(port) for port in _LOCAL_PORT.findall(code)} - {8000}
    if 6379 in ports:
        brokers.require("Redis", "127.0.0.1", 6379)
    printed = _POSTGRES_URL.sub(inside, code)
    with Reader(tmp_path) as reader:
        reader.bridge(database.port, database.hostname)
        for port in sorted(ports):
            reader.bridge(port)
        result, left = reader.run(
            ["bash", "-e", "-o", "pipefail", "-c", printed + CHECK],
            cwd=reader.directory_for("terminal"),
            timeout_s=RECIPE_TIMEOUT_S,
        )
    shown = f"{block.where}:\n{printed}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
    assert result.returncode == 0, shown
    assert "job succeeded" in result.stdout, shown
    assert "batch completed 1" in result.stdout, shown
    assert not left, "processes of the recipe still running after it stopped them: " + shown
