"""Sending one part of a batch as a provider batch, safe under crashes, written once for every
provider's batch API (providers.batch_parts.PartApi): the part is written (its intent, named by
its key) before anything is sent; a part already written without an id is first looked for at
the provider (a create whose answer, or whose recording, a crash lost); only a part found
nowhere is created, and the id the create answers is recorded.
A kill at any point therefore neither loses a provider batch nor creates a second one.

Failpoints: `provider_batch_intended` (the part written, nothing sent) and
`provider_batch_created` (the create answered, its id not yet recorded).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Sequence

from jobgate import errors, failpoints
from jobgate.domain.provider_batches import Part
from jobgate.providers import batch_parts
from jobgate.storage.feature_protocol import ProviderBatchStore
from jobgate.storage.records import ProviderBatch

# How far before the intent's time a provider batch's creation time may read (the provider's
# clock against the database's): the provider's list is searched back this much further.
CLOCK_SKEW_S = 300.0


class PartConflict(Exception):
    """The part already names another provider batch than the one found or created."""


async def send_part(
    storage: ProviderBatchStore,
    api: batch_parts.PartApi,
    part: Part,
    *,
    lines: Sequence[batch_parts.Line],
    known_ids: Collection[str] = (),
    now: dt.datetime | None = None,
) -> ProviderBatch:
    """The part with its provider batch id, sending it (from `lines`, the caller's lines in
    the part's order) if the provider has no batch that is the part's. `known_ids`: provider
    batch ids recorded for the batch's other parts. Raises errors.ProviderOutcomeUnknown when
    the create got no answer and the provider cannot show the part's batch yet (a later call
    looks again before creating), other provider errors as classified, and PartConflict (a
    bug: never two provider batches for one part)."""
    row = await storage.provider_batch_intend(
        part_key=part.key,
        batch_id=part.batch_id,
        provider=part.provider,
        lines=part.lines,
        now=now,
    )
    if row.provider_batch_id is not None:
        return row
    failpoints.hit("provider_batch_intended")
    since = row.created_at - dt.timedelta(seconds=CLOCK_SKEW_S)
    found = await api.find_part(part, since=since, known_ids=known_ids)
    if found is None:
        try:
            found = await api.create_part(part, lines)
        except errors.ProviderOutcomeUnknown:
            found = await api.find_part(part, since=since, known_ids=known_ids)
            if found is None:
                raise
        failpoints.hit("provider_batch_created")
    recorded = await storage.provider_batch_record(
        part_key=part.key, provider_batch_id=str(found["id"]), now=now
    )
    if recorded is None:
        raise PartConflict(f"part {part.key} names another provider batch than {found['id']}")
    return recorded
