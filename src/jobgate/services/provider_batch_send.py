"""Sending one part of a batch as a provider batch, safe under crashes: the part is written
(its intent, named by its key) before anything is sent; a part already written without an id
is first looked for at the provider by its key (a create whose answer, or whose recording, a
crash lost); only a part found nowhere is created, and the id the create answers is recorded.
A kill at any point therefore neither loses a provider batch nor creates a second one.

Failpoints: `provider_batch_intended` (the part written, nothing sent) and
`provider_batch_created` (the create answered, its id not yet recorded).
"""

from __future__ import annotations

import datetime as dt

from jobgate import errors, failpoints
from jobgate.domain.provider_batches import Part
from jobgate.providers import batch_apis
from jobgate.storage.feature_protocol import ProviderBatchStore
from jobgate.storage.records import ProviderBatch

# How far before the intent's time a provider batch's creation time may read (the provider's
# clock against the database's): the provider's list is searched back this much further.
CLOCK_SKEW_S = 300.0


class PartConflict(Exception):
    """The part already names another provider batch than the one found or created."""


async def send_part(
    storage: ProviderBatchStore,
    api: batch_apis.BatchSender,
    part: Part,
    *,
    data: bytes,
    endpoint: str,
    now: dt.datetime | None = None,
) -> ProviderBatch:
    """The part with its provider batch id, sending it if no provider batch carries its key.
    Raises errors.ProviderOutcomeUnknown when the create got no answer and the provider lists
    no batch with the key yet (a later call looks again before creating), other provider
    errors as classified, and PartConflict (a bug: never two provider batches for one part)."""
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
    found = await api.find(part.key, since=since)
    if found is None:
        file_id = await api.upload(data, filename=f"{part.key}.jsonl")
        try:
            found = await api.create(input_file_id=file_id, endpoint=endpoint, part_key=part.key)
        except errors.ProviderOutcomeUnknown:
            found = await api.find(part.key, since=since)
            if found is None:
                raise
        failpoints.hit("provider_batch_created")
    recorded = await storage.provider_batch_record(
        part_key=part.key, provider_batch_id=str(found["id"]), now=now
    )
    if recorded is None:
        raise PartConflict(f"part {part.key} names another provider batch than {found['id']}")
    return recorded
