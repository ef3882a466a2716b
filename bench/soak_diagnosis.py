"""What the soak prints about a job that did not end, or whose webhook never came, so that a late
job can be told from a stuck one without running the soak again: each job's state, phase, last
event, lease expiry and who holds it (and whether that process is alive), its broker
publication, read twice a little apart; and the delivery rows of each missing webhook."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from bench.soak_checks import fetch

_NOT_TERMINAL = """
SELECT j.id, j.state, j.phase, j.attempt, j.event_seq, j.lease_owner, j.provider,
       j.provider_job_id, j.concurrency_key, j.metadata->>'batch_id' AS batch_id,
       extract(epoch FROM j.lease_expires_at)::float8 AS lease_expires_at,
       extract(epoch FROM j.run_at)::float8 AS run_at,
       extract(epoch FROM j.reconcile_at)::float8 AS reconcile_at,
       extract(epoch FROM now())::float8 AS now,
       last.from_state, last.to_state, last.actor, last.reason,
       extract(epoch FROM last.created_at)::float8 AS last_at,
       p.published_count, extract(epoch FROM p.republish_at)::float8 AS republish_at,
       p.deferred
  FROM jobs AS j
  LEFT JOIN LATERAL (SELECT * FROM job_event_log AS e WHERE e.job_id = j.id
                      ORDER BY e.seq DESC LIMIT 1) AS last ON true
  LEFT JOIN transport_publications AS p ON p.job_id = j.id
 WHERE j.state NOT IN ('succeeded', 'failed', 'cancelled', 'expired')
 ORDER BY j.created_at
"""
_OUTBOX = """
SELECT o.job_id, o.event_type, o.state, o.attempts, o.last_status_code, o.last_error,
       extract(epoch FROM o.next_attempt_at - now())::float8 AS next_in_s
  FROM outbox AS o WHERE o.job_id = ANY($1::text[])
"""
_HISTORY = """
SELECT seq, from_state, to_state, actor, reason, applied,
       extract(epoch FROM created_at)::float8 AS at
  FROM job_event_log WHERE job_id = $1 ORDER BY seq
"""
SHOWN = 20
# The API is asked why a queued job waits for at most this many (one request each): a run that
# left thousands queued is judged in seconds, not hours; the others' verdicts go without it.
ASKED = 200


def history(dsn: str, job_id: str, since: float) -> list[str]:
    """A job's event log, each event's time in seconds after `since`."""
    return [
        f"{row['at'] - since:+.3f} s #{row['seq']} {row['from_state']}->{row['to_state']} "
        f"by {row['actor']} ({row['reason']}){'' if row['applied'] else ' not applied'}"
        for row in fetch(dsn, _HISTORY, job_id)
    ]


def not_terminal(
    dsn: str,
    *,
    grace_s: float,
    holder: Callable[[str | None], str],
    kinds: dict[str, str],
    waiting: Callable[[str], Any],
) -> dict[str, Any]:
    """Jobs not terminal, read twice `grace_s` apart: each one's verdict is `late` (it moved;
    it waits on a time that has not come; a live process holds its lease; or it waits its
    turn, as the API's `waiting` says, behind jobs that moved meanwhile) or `stuck`."""
    first = {row["id"]: row for row in fetch(dsn, _NOT_TERMINAL)}
    if not first:
        return {"not_terminal": 0}
    time.sleep(grace_s)
    second = {row["id"]: row for row in fetch(dsn, _NOT_TERMINAL)}
    moved = [
        row for job_id, row in first.items()
        if job_id not in second or second[job_id]["event_seq"] != row["event_seq"]
    ]  # fmt: skip
    moved_by_key = Counter(row["concurrency_key"] for row in moved if row["concurrency_key"])
    verdicts: Counter[str] = Counter()
    lines: list[str] = []
    asked = 0
    for job_id, before in first.items():
        after = second.get(job_id)
        wait = None
        if after is not None and after["state"] == "queued" and asked < ASKED:
            wait, asked = waiting(job_id), asked + 1
        turn = _turn(
            wait,
            len(moved),
            moved_by_key.get(after and after["concurrency_key"], 0),
            after["now"] if after is not None else None,
        )
        verdict = _verdict(before, after, holder, turn)
        verdicts[verdict.split(":")[0]] += 1
        if len(lines) < SHOWN:
            row = after or before
            kind = kinds.get(job_id, "batch line" if row["batch_id"] else "?")
            lines.append(
                f"{job_id} ({kind}): {_describe(row, holder)}, waiting {wait} => {verdict}"
            )
    return {
        "not_terminal": len(first),
        "not_terminal_moved_during_the_look": len(moved),
        "not_terminal_verdicts": dict(verdicts),
        "not_terminal_waiting_asked": asked,
        "not_terminal_jobs": lines,
    }


# What `waiting` says of a job that waits its turn (a cap, the queue, a limit, a time).
TURNS = ("queue", "key_cap", "tenant_cap", "rate_limited", "scheduled")


def _turn(wait: Any, moved: int, moved_of_key: int, now: float | None) -> str | None:
    """Why a due queued job is late rather than stuck, or None: what it waits for ends by
    itself later (a breaker, a rate limit, a pause with an end: `waiting.until` still ahead),
    or it waits its turn and the jobs it waits behind moved during the look (those of its
    key, for a key's cap)."""
    if not isinstance(wait, dict):
        return None
    until = wait.get("until")
    if isinstance(until, int | float) and now is not None and until > now:
        return f"waits {until - now:.1f} s more ({wait.get('reason')})"
    if wait.get("reason") not in TURNS:
        return None
    behind = moved_of_key if wait["reason"] == "key_cap" else moved
    if not behind:
        return None
    return f"waits its turn ({wait['reason']}), {behind} jobs ahead moved during the look"


def _verdict(before: Any, after: Any, holder: Callable[[str | None], str], turn: str | None) -> str:
    if after is None:
        return "late: ended during the second look"
    if after["event_seq"] != before["event_seq"]:
        return "late: moved during the second look"
    now = after["now"]
    if after["state"] == "queued":
        if after["run_at"] > now:
            return f"late: due in {after['run_at'] - now:.1f} s"
        if turn is not None:
            return f"late: {turn}"
        return f"stuck: queued and due for {now - after['run_at']:.1f} s, nobody claims it"
    if after["lease_owner"]:
        if after["lease_expires_at"] <= now:
            return (
                f"stuck: lease expired {now - after['lease_expires_at']:.1f} s ago, not reclaimed"
            )
        if "dead" in holder(after["lease_owner"]):
            return "late: its holder died, the lease runs out soon"
        return "late: a live process holds its lease"
    if after["provider_job_id"]:
        due = after["reconcile_at"]
        if due is None or due < now - 10:
            return "stuck: at its provider, and no reconciler settles it"
        return "late: at its provider, reconciled soon"
    return "stuck: running without a lease or a provider job"


def _describe(row: Any, holder: Callable[[str | None], str]) -> str:
    now = row["now"]
    parts = [f"state {row['state']}", f"phase {row['phase']}", f"attempt {row['attempt']}"]
    if row["to_state"] is not None:
        parts.append(
            f"last event {row['from_state']}->{row['to_state']} by {row['actor']} "
            f"({row['reason']}) {now - row['last_at']:.1f} s ago"
        )
    if row["lease_expires_at"] is not None:
        parts.append(f"lease expires in {row['lease_expires_at'] - now:.1f} s")
    parts.append(f"held by {holder(row['lease_owner'])}")
    if row["provider_job_id"]:
        parts.append(f"provider job {row['provider_job_id']}")
    if row["concurrency_key"]:
        parts.append(f"key {row['concurrency_key']}")
    if row["published_count"] is not None:
        # Deferred: no message in the broker (consumed at a cap, or the publish failed).
        deferred = " (deferred)" if row["deferred"] else ""
        parts.append(
            f"published {row['published_count']}x{deferred}, "
            f"again in {row['republish_at'] - now:.1f} s"
        )
    return ", ".join(parts)


def missing_webhooks(dsn: str, job_ids: Sequence[str]) -> dict[str, Any]:
    """The outbox rows (delivery state, attempts, last answer) of the jobs whose webhook the
    receiver never applied."""
    if not job_ids:
        return {}
    rows = fetch(dsn, _OUTBOX, list(job_ids))
    by_state: Counter[str] = Counter(row["state"] for row in rows)
    with_rows = {row["job_id"] for row in rows}
    lines = [
        f"{row['job_id']} {row['event_type']}: {row['state']} after {row['attempts']} attempts, "
        f"last answer {row['last_status_code']} {row['last_error'] or ''}, "
        f"next attempt in {row['next_in_s']:.1f} s"
        for row in rows[:SHOWN]
    ]
    return {
        "webhook_missing_outbox_states": dict(by_state),
        "webhook_missing_without_outbox_row": len(set(job_ids) - with_rows),
        "webhook_missing_deliveries": lines,
    }
