"""The steps of a claim that SQLite runs in Python inside one write operation (the single writer
makes the counts exact): the slots held per tenant and per concurrency key, the caps checked
against them, the per-key rate limit and budgets, and the lease of the chosen jobs.
job_claim_by_id applies the caps through these; job_claim (sqlite/store.py) reads and leases
the same way, in fair order."""

from __future__ import annotations

import collections
import dataclasses
import sqlite3
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from jobgate.clock import from_unix
from jobgate.domain.fairness import Candidate
from jobgate.domain.rate_limits import KEY_BUCKET_PREFIX
from jobgate.storage.records import ClaimPolicy, TenantShare
from jobgate.storage.rows import unix_time
from jobgate.storage.sqlite.executor import Q, json_text
from jobgate.storage.sqlite.rate_limits import buckets_changed
from jobgate.storage.store.rate_limits import key_buckets, started

_EPOCH = from_unix(0)  # a candidate's run_at that is no time at all sorts first


@dataclasses.dataclass(slots=True)
class RunningSlots:
    """Worker slots held now per tenant, and (only while a per-key cap applies) running jobs
    per key, those at their provider in background mode included."""

    tenants: dict[str, int]
    keys: dict[tuple[str, str], int]

    @classmethod
    def read(cls, conn: sqlite3.Connection, rules: ClaimPolicy) -> RunningSlots:
        tenants = dict(conn.execute(Q["job_claim_running"].sql).fetchall())
        keys: dict[tuple[str, str], int] = {}
        if rules.keys_capped:
            for row in conn.execute(Q["job_claim_running_keys"].sql).fetchall():
                keys[(row["tenant_id"], row["concurrency_key"])] = row["running"]
        return cls(tenants, keys)

    def take(self, share: TenantShare, tenant: str, key: str | None) -> bool:
        """Take a slot for one more job of `tenant` (and `key`) if its caps (0: none) leave
        one free."""
        if share.tenant_full(self.tenants.get(tenant, 0)):
            return False
        slot = (tenant, key) if share.max_running_per_key > 0 and key is not None else None
        if slot is not None and share.key_full(self.keys.get(slot, 0)):
            return False
        self.tenants[tenant] = self.tenants.get(tenant, 0) + 1
        if slot is not None:
            self.keys[slot] = self.keys.get(slot, 0) + 1
        return True


@dataclasses.dataclass(slots=True)
class KeyLimits:
    """The per-key rate limit and budgets of one claim at `now` (Unix seconds): the keys of a
    tenant it passes over (over a daily budget per key, or their rpm_per_key bucket not open
    yet), at most one start per key under rpm_per_key, and the buckets of the keys it started
    taken in the same write operation (the one writer serialises it with every other claim)."""

    rules: ClaimPolicy
    now: float
    rated: set[tuple[str, str]] = dataclasses.field(default_factory=set)  # kept this claim

    def passed_over(self, conn: sqlite3.Connection, tenant: str) -> list[str]:
        keys = [key for (t, key) in self.rules.blocked_keys if t == tenant]
        if self.rules.share(tenant).rpm_per_key > 0:
            params = {"provider": KEY_BUCKET_PREFIX + tenant, "now": self.now}
            keys += [row["model"] for row in conn.execute(Q["key_buckets_closed"].sql, params)]
        return keys

    def admits(self, tenant: str, key: str | None) -> bool:
        """Whether a job of `key` may start in this claim: the first of its key only, under
        its tenant's rpm_per_key (its bucket admits one start)."""
        if key is None or self.rules.share(tenant).rpm_per_key <= 0:
            return True
        if (tenant, key) in self.rated:
            return False
        self.rated.add((tenant, key))
        return True

    def take(self, conn: sqlite3.Connection, leased: Leased) -> None:
        """Take one start from the bucket of each key under rpm_per_key the claim started."""
        if not self.rules.keys_rated or not leased.rows:
            return
        at_tenant = leased.columns.index("tenant_id")
        at_key = leased.columns.index("concurrency_key")
        pairs = ((row[at_tenant], row[at_key]) for row in leased.rows)
        buckets = key_buckets(pairs, self.rules)
        if buckets:
            buckets_changed(conn, buckets, self.now, started)


def keeper(
    slots: RunningSlots, keys: KeyLimits, share: TenantShare, tenant: str
) -> Callable[[str | None], bool] | None:
    """What a tenant's candidates must pass, best first, given their concurrency key: a free
    slot of the key under max_running_per_key, a start of its own under rpm_per_key (None:
    the tenant has neither)."""
    capped, rated = share.max_running_per_key > 0, share.rpm_per_key > 0
    if not capped and not rated:
        return None

    def keep(key: str | None) -> bool:
        if rated and not keys.admits(tenant, key):
            return False
        return not capped or slots.take(share, tenant, key)

    return keep


def candidates(
    conn: sqlite3.Connection,
    params: dict[str, Any],
    *,
    keep: Callable[[str | None], bool] | None,
    times: dict[Any, datetime],
) -> tuple[Candidate, ...]:
    """A tenant's claimable jobs (job_claim_candidates), best first, without those `keep`
    refuses given their concurrency key (asked in that order). Rows come as tuples, and each
    stored run_at is decoded once per claim (`times`; a submit batch's jobs share theirs)."""
    cursor = conn.cursor()
    cursor.row_factory = None  # tuples: no sqlite3.Row and its lookups by name
    cursor.execute(Q["job_claim_candidates"].sql, params)
    found: list[Candidate] = []
    for job_id, priority, run_at, key in cursor.fetchall():  # the SELECT's column order
        if keep is not None and not keep(key):
            continue
        moment = times.get(run_at)
        if moment is None:
            moment = times[run_at] = unix_time(run_at) or _EPOCH
        found.append(Candidate(job_id, priority, moment))
    return tuple(found)


@dataclasses.dataclass(frozen=True, slots=True)
class Leased:
    """Rows the claim leased, as plain tuples (`columns` names their values), decoded by the
    caller once committed (RowDecoder.jobs_at): the writer thread, whose time caps the drain,
    builds no ~45-entry dict per claimed job, and moves on to the next group meanwhile."""

    columns: tuple[str, ...]
    rows: Sequence[tuple[Any, ...]]


NOTHING_LEASED = Leased((), ())


def lease(
    conn: sqlite3.Connection, ids: Sequence[str], *, worker_id: str, lease_ttl_s: float, now: float
) -> Leased:
    """Lease the chosen jobs still queued, and count each tenant's claims (its drain rate). The
    rows come back in the order of `ids`."""
    params = {"ids": json_text(list(ids)), "worker_id": worker_id, "now": now}
    cursor = conn.cursor()
    cursor.row_factory = None  # tuples: no sqlite3.Row, no dict
    cursor.execute(Q["job_claim"].sql, {**params, "lease_ttl_s": lease_ttl_s})
    columns = tuple(column[0] for column in cursor.description)
    rows: list[tuple[Any, ...]] = cursor.fetchall()
    at_id, at_tenant = columns.index("id"), columns.index("tenant_id")
    claimed = {row[at_id]: row for row in rows}
    for tenant_id, count in collections.Counter(row[at_tenant] for row in rows).items():
        conn.execute(Q["tenant_stats_bump"].sql, {"tenant_id": tenant_id, "count": count})
    return Leased(columns, [claimed[job_id] for job_id in ids if job_id in claimed])


def mapped_rows(cursor: sqlite3.Cursor) -> list[dict[str, Any]]:
    """A cursor's rows as dicts. A job row is read by some 45 column names, and sqlite3.Row
    finds each name by a linear, case-insensitive scan of its ~50 columns; a dict hashes."""
    names = [column[0] for column in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
