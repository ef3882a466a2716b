"""What the console's pages show, built from storage records: a job's attempts from its
events, its cost from its usage, and the search/bulk filter read from a query or a form."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from decimal import Decimal

from jobgate import errors
from jobgate.domain import costs
from jobgate.domain.bulk import MAX_METADATA_KEYS, BulkAction, JobFilter
from jobgate.domain.job import JobEvent
from jobgate.domain.states import JobState
from jobgate.storage.records import UsageEntry

MAX_FIELD_CHARS = 200
FILTER_FIELDS = ("q", "tenant", "status", "provider", "model", "error_code", "dead", "since")
# "Created within": the choices of the filter, in seconds.
# Criteria the search box reads as `name=value` (any other key is a metadata pair).
SEARCH_TERMS = ("model", "provider")
SINCE_S = {"15m": 900, "1h": 3600, "6h": 6 * 3600, "24h": 86_400, "7d": 7 * 86_400}


@dataclasses.dataclass(frozen=True, slots=True)
class Attempt:
    number: int
    started_at: datetime
    ended_at: datetime | None
    outcome: str  # the state it ended in, or `running`
    reason: str | None  # the verdict: an error code, `completed`, `lease_expired`…
    worker: str
    waited_s: float | None  # in the queue before this claim

    @property
    def duration_s(self) -> float | None:
        if self.ended_at is None:
            return None
        return (self.ended_at - self.started_at).total_seconds()


def attempts(events: Sequence[JobEvent]) -> list[Attempt]:
    """One row per claim (every `→ running` event), ended by the next applied event."""
    rows: list[Attempt] = []
    queued_at: datetime | None = None
    claim: JobEvent | None = None

    def opened(event: JobEvent, ended: JobEvent | None) -> Attempt:
        return Attempt(
            number=len(rows) + 1,
            started_at=event.created_at,
            ended_at=None if ended is None else ended.created_at,
            outcome=JobState.RUNNING.value if ended is None else str(ended.to_state),
            reason=None if ended is None else ended.reason,
            worker=event.actor,
            waited_s=None if queued_at is None else (event.created_at - queued_at).total_seconds(),
        )

    for event in events:
        if not event.applied:
            continue
        if claim is not None:
            rows.append(opened(claim, event))
            claim = None
        if event.to_state is JobState.RUNNING:
            claim = event
        elif event.to_state is JobState.QUEUED:
            queued_at = event.created_at
    if claim is not None:
        rows.append(opened(claim, None))
    return rows


@dataclasses.dataclass(frozen=True, slots=True)
class JobCost:
    input_tokens: int
    output_tokens: int
    usd: Decimal | None  # None: no price configured for this provider and model


def job_cost(usage: Sequence[UsageEntry], prices: costs.Prices) -> JobCost:
    input_tokens = sum(u.input_tokens for u in usage)
    output_tokens = sum(u.output_tokens for u in usage)
    total = Decimal(0)
    for entry in usage:
        price = costs.price_for(prices, provider=entry.provider, model=entry.model)
        if price is None:
            return JobCost(input_tokens, output_tokens, None)
        total += costs.cost_usd(
            price,
            input_tokens=entry.input_tokens,
            output_tokens=entry.output_tokens,
            cache_read_tokens=entry.cache_read_tokens,
            cache_write_tokens=entry.cache_write_tokens,
        )
    return JobCost(input_tokens, output_tokens, total)


@dataclasses.dataclass(frozen=True, slots=True)
class ConsoleFilter:
    """The jobs page's filter as typed: a search box and exact criteria (empty: any)."""

    q: str = ""  # a job id, a provider's job id, or metadata `key=value` pairs
    tenant: str = ""
    status: str = ""
    provider: str = ""
    model: str = ""
    error_code: str = ""
    dead: str = ""  # "1": dead letters only
    since: str = ""  # created within a key of SINCE_S before the search

    @classmethod
    def read(cls, values: Mapping[str, str]) -> ConsoleFilter:
        fields = {}
        for name in FILTER_FIELDS:
            value = (values.get(name) or "").strip()
            if len(value) > MAX_FIELD_CHARS or "\x00" in value:
                raise errors.InvalidRequest(f"{name} is too long", param=name)
            fields[name] = value
        if fields["status"] and fields["status"] not in {s.value for s in JobState}:
            raise errors.InvalidRequest("unknown status", param="status")
        if fields["since"] and fields["since"] not in SINCE_S:
            raise errors.InvalidRequest("unknown time range", param="since")
        return cls(**fields)

    def query(self) -> dict[str, str]:
        """The non-empty fields, for links and hidden form fields."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v}

    def metadata(self) -> dict[str, str] | None:
        """The search box's metadata pairs, if any (see `terms`)."""
        return self.terms()[0] or None

    def terms(self) -> tuple[dict[str, str], dict[str, str]]:
        """The search box's `key=value` terms (separated by spaces or commas), as GET /v1/jobs
        reads them: `model=…` and `provider=…` are those criteria, `metadata[KEY]=…` is a
        metadata pair (whatever KEY is, `model` too), and any other `key=value` a metadata
        pair. (metadata pairs, criteria)."""
        pairs: dict[str, str] = {}
        criteria: dict[str, str] = {}
        if "=" not in self.q:
            return pairs, criteria
        for token in self.q.replace(",", " ").split():
            key, sep, value = token.partition("=")
            if not sep or not key:
                raise errors.InvalidRequest("search by metadata as key=value", param="q")
            if key in SEARCH_TERMS:
                if not value:
                    raise errors.InvalidRequest(f"{key}= needs a value", param="q")
                criteria[key] = value
            elif key.startswith("metadata[") and key.endswith("]") and len(key) > 10:
                pairs[key[9:-1]] = value
            else:
                pairs[key] = value
        if len(pairs) > MAX_METADATA_KEYS:
            raise errors.InvalidRequest(f"at most {MAX_METADATA_KEYS} pairs", param="q")
        return pairs, criteria

    def _criterion(self, name: str, criteria: Mapping[str, str]) -> str | None:
        """A criterion given in its own field or in the search box; both, differing, is an
        error (no job could match)."""
        field, term = str(getattr(self, name)), criteria.get(name, "")
        if field and term and field != term:
            raise errors.InvalidRequest(f"{name} is {field!r} and {term!r}", param="q")
        return field or term or None

    def identifier(self) -> str | None:
        """The search box as an id (a job's or the provider's), when it is not metadata."""
        return self.q if self.q and "=" not in self.q else None

    def job_filter(self, tenant_id: str | None, now: datetime) -> JobFilter:
        """The criteria as a bulk filter; `tenant_id` is the named tenant's id ("" for an
        unknown name: it matches nothing), `now` the moment a time range counts back from."""
        pairs, criteria = self.terms()
        return JobFilter(
            created_after=now - timedelta(seconds=SINCE_S[self.since]) if self.since else None,
            tenant_id=tenant_id,
            states=(JobState(self.status),) if self.status else None,
            provider=self._criterion("provider", criteria),
            model=self._criterion("model", criteria),
            error_code=self.error_code or None,
            metadata=pairs or None,
            dead_lettered=True if self.dead == "1" else None,
        )


BULK_ACTIONS = {a.value: a for a in BulkAction}
