"""The soak's invariants over the new surfaces, read once everything settled: from the database
(the event log, in commit order where order matters) and through the API as a user reads it.

- a key over its cap: the running intervals of each concurrency key's jobs, from the event log
  ordered by commit timestamp (a claim that saw a job gone committed after that job left), may
  never overlap more than `max_running_per_key` deep;
- a rate limit exceeded: the claims of the rate-limited provider, in any window of m spacings
  (60 / rpm), may number at most m + 1. Each claim follows the take of its request, and takes
  are a spacing apart: counting whole spacings keeps the check exact while a claim trails its
  take by less than one spacing;
- a job of a cancelled batch started after the cancel committed (the claim's transaction began
  after the cancel's answer reached the soak);
- a batch whose request_counts differ from its lines, or whose output and error files miss or
  double a line;
- a succeeded streaming job whose streamed text (after the last reset) differs from its result.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import asyncpg
import httpx

from bench.soak_load import LIMITED, SoakBatch

_KEY_EVENTS = """
SELECT e.job_id, j.concurrency_key AS key, e.from_state, e.to_state,
       extract(epoch FROM pg_xact_commit_timestamp(e.xmin))::float8 AS committed
  FROM job_events AS e JOIN jobs AS j ON j.id = e.job_id
 WHERE j.concurrency_key IS NOT NULL AND e.applied
   AND (e.to_state = 'running' OR e.from_state = 'running')
"""
_CLAIMS = """
SELECT e.job_id, j.provider, j.metadata->>'batch_id' AS batch_id,
       extract(epoch FROM e.created_at)::float8 AS at
  FROM job_event_log AS e JOIN jobs AS j ON j.id = e.job_id
 WHERE e.applied AND e.from_state = 'queued' AND e.to_state = 'running'
   AND (j.provider = $1 OR j.metadata->>'batch_id' = ANY($2::text[]))
"""
_BATCH_JOBS = """
SELECT metadata->>'batch_id' AS batch_id, state, count(*) AS n
  FROM jobs WHERE metadata->>'batch_id' = ANY($1::text[]) GROUP BY 1, 2
"""
RATE_WINDOWS = (1, 2, 5, 15, 30)  # in spacings
NEVER_RAN = ("batch_cancelled", "batch_expired")  # the error code of a line that never ran


async def _fetch(dsn: str, query: str, *args: Any) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn, timeout=30)
    try:
        return list(await conn.fetch(query, *args, timeout=300))
    finally:
        await conn.close()


def fetch(dsn: str, query: str, *args: Any) -> list[asyncpg.Record]:
    return asyncio.run(_fetch(dsn, query, *args))


# -- keys and rates ------------------------------------------------------------------------


def keys_over_cap(dsn: str, cap: int) -> dict[str, Any]:
    rows = fetch(dsn, _KEY_EVENTS)
    unordered = sum(1 for r in rows if r["committed"] is None)
    by_key: dict[str, list[tuple[float, int, str]]] = defaultdict(list)
    for row in rows:
        if row["committed"] is None:
            continue
        if row["from_state"] == "running":  # leaves first at one instant: never a false alarm
            by_key[row["key"]].append((row["committed"], 0, row["job_id"]))
        if row["to_state"] == "running":
            by_key[row["key"]].append((row["committed"], 1, row["job_id"]))
    over: list[dict[str, Any]] = []
    deepest = 0
    for key, moves in by_key.items():
        running: set[str] = set()
        for at, enters, job_id in sorted(moves):
            if enters:
                running.add(job_id)
                if len(running) > cap:
                    over.append({"key": key, "at": at, "running": sorted(running)})
            else:
                running.discard(job_id)
            deepest = max(deepest, len(running))
    return {
        "keys_over_cap": len(over),
        "key_running_most": deepest,
        "key_events_without_commit_time": unordered,
        "key_over_cap_sample": over[:5],
    }


def rate_windows(claim_times: Sequence[float], rpm: int) -> dict[str, Any]:
    spacing = 60.0 / rpm
    times = sorted(claim_times)
    over: list[dict[str, Any]] = []
    for spacings in RATE_WINDOWS:
        window = spacings * spacing
        bound = spacings + 1
        last = 0
        for first, start in enumerate(times):
            last = max(last, first)
            while last < len(times) and times[last] < start + window:
                last += 1
            if last - first > bound:
                over.append({"window_s": window, "starts": last - first, "bound": bound,
                             "from": start})  # fmt: skip
    achieved = 0.0
    if len(times) > 1:
        achieved = (len(times) - 1) * 60.0 / (times[-1] - times[0])
    return {
        "rate_limited_starts": len(times),
        "rate_limit_windows_over": len(over),
        "rate_limited_starts_per_minute": round(achieved, 1),
        "rate_limit_over_sample": over[:5],
    }


def claims(dsn: str, batch_ids: Iterable[str]) -> tuple[list[float], list[tuple[str, str, float]]]:
    """The rate-limited provider's claim times, and the claims of the batches' jobs."""
    rows = fetch(dsn, _CLAIMS, LIMITED, list(batch_ids))
    limited = [row["at"] for row in rows if row["provider"] == LIMITED]
    of_batches = [(row["job_id"], row["batch_id"], row["at"]) for row in rows if row["batch_id"]]
    return limited, of_batches


def started_after_cancel(
    batch_claims: Iterable[tuple[str, str, float]], batches: dict[str, SoakBatch]
) -> list[dict[str, Any]]:
    late = []
    for job_id, batch_id, at in batch_claims:
        cancelled = batches[batch_id].cancel_answered_at
        if cancelled is not None and at > cancelled:
            late.append({"job": job_id, "batch": batch_id, "cancelled_at": cancelled,
                         "after_cancel_s": round(at - cancelled, 3)})  # fmt: skip
    return late


# -- batches ---------------------------------------------------------------------------------


def check_batches(
    client: httpx.Client, dsn: str, batches: dict[str, SoakBatch], applied: dict[str, int]
) -> dict[str, Any]:
    jobs: dict[str, Counter[str]] = defaultdict(Counter)
    for row in fetch(dsn, _BATCH_JOBS, list(batches)):
        jobs[row["batch_id"]][row["state"]] = row["n"]
    statuses: Counter[str] = Counter()
    problems: dict[str, list[str]] = defaultdict(list)
    lines_missing = lines_doubled = 0
    for batch in batches.values():
        view = client.get(f"/v1/batches/{batch.id}").raise_for_status().json()
        statuses[view["status"]] += 1
        if view["status"] not in ("completed", "cancelled", "failed", "expired"):
            problems["not_ended"].append(batch.id)
            continue
        wanted = "cancelled" if batch.cancel_answered_at is not None else "completed"
        if view["status"] != wanted:
            problems["wrong_status"].append(f"{batch.id}: {view['status']}, wanted {wanted}")
        output = _lines(client, view.get("output_file_id"))
        errors = _lines(client, view.get("error_file_id"))
        counts = view["request_counts"]
        if view["status"] == "cancelled" and view["in_progress_at"] is None:
            # Cancelled while its file was validated (as OpenAI): no line was read, so none
            # is counted and neither file holds one.
            statuses["cancelled while validating"] += 1
            if counts["total"] or output or errors or jobs[batch.id].total():
                problems["counts_differ"].append(
                    f"{batch.id}: cancelled while validating, yet counts {counts}, "
                    f"{len(output)} output lines, {len(errors)} error lines, "
                    f"{jobs[batch.id].total()} jobs"
                )
            if applied.get(batch.id, 0) == 0:
                problems["webhook_missing"].append(batch.id)
            continue
        succeeded = jobs[batch.id]["succeeded"]
        if not _counts_agree(counts, len(batch.custom_ids), output, errors, succeeded):
            problems["counts_differ"].append(
                f"{batch.id}: counts {counts}, {len(output)} output lines, {len(errors)} error "
                f"lines, {succeeded} jobs succeeded, {len(batch.custom_ids)} lines sent"
            )
        seen = Counter(line["custom_id"] for line in output + errors)
        missing = [c for c in batch.custom_ids if seen[c] == 0]
        doubled = [c for c, n in seen.items() if n > 1 or c not in set(batch.custom_ids)]
        lines_missing += len(missing)
        lines_doubled += len(doubled)
        if missing or doubled:
            problems["lines"].append(f"{batch.id}: missing {missing[:5]}, doubled {doubled[:5]}")
        if applied.get(batch.id, 0) == 0:
            problems["webhook_missing"].append(batch.id)
    cancelled = [b for b in batches.values() if b.cancel_answered_at is not None]
    return {
        "batches": len(batches),
        "batches_cancelled": len(cancelled),
        "batch_statuses": dict(sorted(statuses.items())),
        "batch_lines": sum(len(b.custom_ids) for b in batches.values()),
        "batches_not_ended": len(problems["not_ended"]),
        "batches_wrong_status": len(problems["wrong_status"]),
        "batch_counts_differ": len(problems["counts_differ"]),
        "batch_lines_missing": lines_missing,
        "batch_lines_doubled": lines_doubled,
        "batch_webhooks_missing": len(problems["webhook_missing"]),
        "batch_problems_sample": {k: v[:5] for k, v in problems.items() if v},
    }


def _counts_agree(
    counts: dict[str, int],
    sent: int,
    output: list[dict[str, Any]],
    errors: list[dict[str, Any]],
    succeeded: int,
) -> bool:
    """request_counts say what the files hold: `completed` the output lines (each a succeeded
    job), `failed` the error lines, except lines that never ran (cancelled or expired), which
    count either as failed (frozen as total - completed) or as neither (as OpenAI counts
    them); every line sent is counted once."""
    never_ran = sum(1 for e in errors if (e.get("error") or {}).get("code") in NEVER_RAN)
    rules = ((len(errors), 0), (len(errors) - never_ran, never_ran))  # (failed, uncounted)
    return (
        counts["total"] == sent
        and counts["completed"] == len(output) == succeeded
        and any(
            counts["failed"] == failed and counts["completed"] + failed + uncounted == sent
            for failed, uncounted in rules
        )
    )


def _lines(client: httpx.Client, file_id: str | None) -> list[dict[str, Any]]:
    if not file_id:
        return []
    text = client.get(f"/v1/files/{file_id}/content").raise_for_status().text
    return [json.loads(line) for line in text.splitlines() if line.strip()]


# -- streams ---------------------------------------------------------------------------------


def check_streams(client: httpx.Client, job_ids: Sequence[str]) -> dict[str, Any]:
    """Read each succeeded streaming job's stream from the start, as a client would."""
    with ThreadPoolExecutor(8) as pool:
        verdicts = list(pool.map(lambda job_id: _stream_differs(client, job_id), job_ids))
    differ = [v for v in verdicts if v is not None]
    return {
        "streams_checked": len(job_ids),
        "streams_differing": len(differ),
        "stream_differ_sample": differ[:5],
    }


def _stream_differs(client: httpx.Client, job_id: str) -> str | None:
    text: list[str] = []
    terminal: tuple[str, dict[str, Any]] | None = None
    with client.stream("GET", f"/v1/jobs/{job_id}/stream", timeout=60) as response:
        if response.status_code != 200:
            return f"{job_id}: stream answered {response.status_code}"
        for event, data in _sse(response.iter_lines()):
            if event == "output.reset":
                text = []
            elif event == "output.delta":
                text.append(data["text"])
            elif event.startswith("job."):
                terminal = (event, data)
                break
    if terminal is None or terminal[0] != "job.succeeded":
        return f"{job_id}: the stream ended with {terminal and terminal[0]}"
    final = _content(terminal[1].get("result"))
    streamed = "".join(text)
    if streamed != final:
        return f"{job_id}: streamed {streamed[:60]!r}, result {final[:60]!r}"
    return None


def _sse(lines: Iterable[str]) -> Iterable[tuple[str, dict[str, Any]]]:
    event, data = "", ""
    for line in lines:
        if line.startswith("event: "):
            event = line[len("event: ") :]
        elif line.startswith("data: "):
            data = line[len("data: ") :]
        elif not line and event:
            yield event, json.loads(data or "{}")
            event, data = "", ""


def _content(result: Any) -> str:
    """The text of a Chat Completion's first choice, of a Message's text blocks or of a
    Response's output messages."""
    try:
        if isinstance(result, dict) and result.get("type") == "message":
            return "".join(b["text"] for b in result["content"] if b["type"] == "text")
        if isinstance(result, dict) and result.get("object") == "response":
            return "".join(
                part["text"]
                for item in result["output"]
                if item["type"] == "message"
                for part in item["content"]
                if part["type"] == "output_text"
            )
        return str(result["choices"][0]["message"]["content"] or "")
    except (KeyError, IndexError, TypeError):
        return ""
