"""The journal survives a client killed (SIGKILL) between sending a submit and its answer, and
resume() settles the submit without creating a second job. Real processes throughout.

Two crashes, each made deterministic by the server: (1) the server committed the job and is
frozen before answering (failpoint `after_submit_commit_before_response=stall`); (2) the server
is stopped (SIGSTOP) so the request never gets processed. In both, the client's outcome is
unknown; re-sending with the journaled key must yield exactly one job.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from jobgate.client import Client, Journal
from tests.client.server import JobgateServer, clean_env, wait_until

pytestmark = pytest.mark.e2e

CLIENT = """
import sys
from jobgate.client import Client

url, key, journal = sys.argv[1:4]
body = {"model": "sim-echo", "messages": [{"role": "user", "content": "exactly once"}]}
with Client(url, key, journal=journal, timeout_s=600, max_retries=0) as client:
    client.submit("/v1/chat/completions", body)
print("answered", flush=True)
"""
STALLED = "jobgate failpoint after_submit_commit_before_response: stall"
# The frozen server's worker may have claimed the job before freezing: a short lease lets the
# restarted server's reaper take it back in seconds rather than a minute.
SHORT_LEASES = {
    "JOBGATE_LEASE_TTL_S": "2",
    "JOBGATE_HEARTBEAT_INTERVAL_S": "0.5",
    "JOBGATE_REAPER_INTERVAL_S": "0.5",
}


def pending_ops(path: Path) -> list[str]:
    if not path.exists():
        return []
    journal = Journal(path)
    try:
        return [op.id for op in journal.operations() if op.state == "pending"]
    finally:
        journal.close()


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
@pytest.mark.parametrize("crash", ["committed_unanswered", "never_processed"])
def test_resume_after_sigkill_creates_no_duplicate_job(
    crash: str, backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    database_url = request.getfixturevalue("pg_dsn") if backend == "postgres" else None
    failpoints = (
        "after_submit_commit_before_response=stall@1" if crash == "committed_unanswered" else ""
    )
    server = JobgateServer(
        tmp_path, database_url=database_url, failpoints=failpoints, env=SHORT_LEASES
    ).start()
    journal_path = tmp_path / "ops.db"
    restarted = None
    try:
        if crash == "never_processed":
            server.signal(signal.SIGSTOP)
        client = subprocess.Popen(
            [sys.executable, "-c", CLIENT, server.url, server.api_key, str(journal_path)],
            env=clean_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        wait_until(lambda: len(pending_ops(journal_path)) == 1, message="the journaled submit")
        if crash == "committed_unanswered":
            server.wait_for_stderr(STALLED)  # the job is committed; the answer will never come
        client.kill()
        out, err = client.communicate(timeout=30)
        assert client.returncode == -signal.SIGKILL, err
        assert "answered" not in out

        journal = Journal(journal_path)
        (op,) = journal.operations()
        journal.close()
        assert (op.state, op.job_id, op.sends) == ("pending", None, 1)

        server.kill()  # a stopped or frozen server dies too; its database keeps what committed
        restarted = JobgateServer(
            tmp_path,
            database_url=server.database_url,
            port=server.port,
            api_key=server.api_key,
            env=SHORT_LEASES,
        ).start()
        with Client(restarted.url, restarted.api_key, journal=journal_path) as resumer:
            before = [job.id for job in resumer.list().data]
            assert len(before) == (1 if crash == "committed_unanswered" else 0)

            (resumed,) = resumer.resume()
            assert resumed.id == op.id and resumed.sends == 2
            assert resumed.state in ("accepted", "finished") and resumed.job_id is not None

            after = [job.id for job in resumer.list().data]
            assert after == [resumed.job_id]  # one job, whichever way the crash fell
            if before:
                assert before == after  # the server answered the job it had already made
            done = resumer.wait(resumed.job_id, timeout_s=60)
            assert done.status == "succeeded" and done.output_text == "echo: exactly once"
            assert resumer.resume() == []  # settled
    finally:
        server.kill()
        if restarted is not None:
            restarted.stop()
