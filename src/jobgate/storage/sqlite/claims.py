"""The steps of a claim that SQLite runs in Python inside one write operation (the single writer
makes the counts exact): the slots held per tenant and per concurrency key, the caps checked
against them, and the lease of the chosen jobs. job_claim_by_id applies the caps through these;
job_claim (sqlite/store.py) reads and leases the same way."""

from __future__ import annotations

import collections
import dataclasses
import sqlite3
from collections.abc import Sequence

import orjson

from jobgate.domain.job import Job
from jobgate.storage import sql
from jobgate.storage.records import ClaimPolicy, TenantShare
from jobgate.storage.rows import RowDecoder

Q = sql.load("jobgate.storage.sqlite")


@dataclasses.dataclass(slots=True)
class RunningSlots:
    """Worker slots held now, per tenant and (only while a per-key cap applies) per key."""

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
        if share.max_running > 0 and self.tenants.get(tenant, 0) >= share.max_running:
            return False
        slot = (tenant, key) if share.max_running_per_key > 0 and key is not None else None
        if slot is not None and self.keys.get(slot, 0) >= share.max_running_per_key:
            return False
        self.tenants[tenant] = self.tenants.get(tenant, 0) + 1
        if slot is not None:
            self.keys[slot] = self.keys.get(slot, 0) + 1
        return True


def lease(
    conn: sqlite3.Connection,
    ids: Sequence[str],
    *,
    worker_id: str,
    lease_ttl_s: float,
    now: float,
    decode: RowDecoder,
) -> list[Job]:
    """Lease the chosen jobs still queued, and count each tenant's claims (its drain rate)."""
    params = {"ids": orjson.dumps(list(ids)).decode(), "worker_id": worker_id, "now": now}
    rows = conn.execute(Q["job_claim"].sql, {**params, "lease_ttl_s": lease_ttl_s}).fetchall()
    claimed = [decode.job(row) for row in rows]
    for tenant_id, count in collections.Counter(job.tenant_id for job in claimed).items():
        conn.execute(Q["tenant_stats_bump"].sql, {"tenant_id": tenant_id, "count": count})
    return claimed
