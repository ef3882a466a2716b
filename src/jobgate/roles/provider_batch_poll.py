"""Provider-native batches, the following side (for the batches role): each part sent is asked
how it stands (at most once per `poll_interval_s`), its status and request counts kept for
reads of the batch; a part that ended has its output and error files read back line by line
into the batch's lines, with its usage billed once, in one fenced transaction. A batch that is
cancelled or expires passes the cancel on to its live parts, resolves any part whose create
outcome is unknown (by the part's key, never by creating), and waits for them to end.

The database is the truth of which parts exist; the provider is the authority on each part's
state: nothing here decides a part ended without the provider saying so, save a part that was
never created, or whose provider is no longer configured, once its batch is cancelled or
expired.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections.abc import Callable
from typing import Any

from jobgate import errors
from jobgate.providers import batch_parts
from jobgate.providers.batch_apis import LineBack, NativeBatchApi, PartStatus
from jobgate.roles import batch_results, provider_batch_send
from jobgate.roles.native_dispatch import (
    LINES_PAGE,
    NativeBatches,
    as_part,
    custom_id,
    part_line,
)
from jobgate.storage.protocol import BatchRunnerStorage
from jobgate.storage.records import BatchRecord, NativeResult, PartEnding, ProviderBatch
from jobgate.wire import openai_batch_results as provider_batch_results
from jobgate.wire import openai_batches as batch_rules
from jobgate.wire.openai_batches import BatchStatus, RequestCounts

log = logging.getLogger(__name__)

# A line the provider never ran because its batch was cancelled or expired counts as neither
# completed nor failed (as OpenAI counts); one whose batch failed, or that is missing from a
# completed batch's files, failed.
_NOT_RUN_CODES = frozenset(code for code, _ in batch_rules.NOT_RUN.values())


class PartFollower:
    """Follows the parts of the batches its runner holds; what it remembers (when each part
    was last asked, which cancels were sent) is only to save calls: a new process starts
    from the database."""

    def __init__(
        self,
        *,
        storage: BatchRunnerStorage,
        native: NativeBatches,
        poll_interval_s: float,
        monotonic: Callable[[], float],
    ) -> None:
        self.storage = storage
        self.native = native
        self.poll_interval_s = poll_interval_s
        self._monotonic = monotonic
        self._polled: dict[str, float] = {}  # part key -> when this process last asked
        self._cancelled: set[str] = set()  # provider batch ids this process asked to cancel

    async def follow(self, batch: BatchRecord) -> bool:
        """One look at each of the batch's parts not read back yet; True once every part is
        (a batch with no parts: at once). A batch with a final status (cancelled, expired)
        has its live parts cancelled at the provider."""
        if not self.native.enabled:
            return True
        stopping = batch.final_status is not None
        done = True
        for part in await self.storage.provider_batches_of(batch_id=batch.id):
            if part.collected_at is not None:
                continue
            try:
                ended = await self._look(batch, part, stopping=stopping)
            except (
                errors.ProviderRetryable,
                errors.ProviderRateLimited,
                errors.ProviderOutcomeUnknown,
            ) as exc:
                log.warning(
                    "provider batch not read: %s",
                    type(exc).__name__,
                    extra={"batch_id": batch.id, "provider": part.provider},
                )
                ended = False
            done = done and ended
        return done

    async def cancel_all(self, batch: BatchRecord) -> None:
        """Ask the provider to cancel each of the batch's parts not read back (a batch that
        failed: nothing will read them). Best effort: a failure is logged."""
        for part in await self.storage.provider_batches_of(batch_id=batch.id):
            api = self.native.api(part.provider)
            if part.collected_at is not None or part.provider_batch_id is None or api is None:
                continue
            try:
                await self._cancel(api.cancel, part.provider_batch_id, batch)
            except errors.ProviderError as exc:
                log.warning(
                    "provider batch of a failed batch not cancelled: %s",
                    type(exc).__name__,
                    extra={"batch_id": batch.id, "provider": part.provider},
                )

    async def _look(self, batch: BatchRecord, part: ProviderBatch, *, stopping: bool) -> bool:
        api = self.native.api(part.provider)
        if api is None:
            # Its provider is no longer configured with native batches: nothing can read the
            # part. It waits (the configuration may come back) until the batch is cancelled
            # or expires; then its lines read as not run, and the batch can end.
            log.error(
                "provider batch of a provider without native batches now: not followed",
                extra={"batch_id": batch.id, "provider": part.provider},
            )
            if stopping:
                await self._end(batch, part, _never_created(batch), _not_sent(part))
                return True
            return False
        if part.provider_batch_id is None:
            if not stopping:
                return False  # native_dispatch sends it (or finds it) first
            found = await self._find(batch, api, part)
            if found is None:  # never created: its lines did not run
                await self._end(batch, part, _never_created(batch), _not_sent(part))
                return True
            part = dataclasses.replace(part, provider_batch_id=found)
        provider_id = part.provider_batch_id
        assert provider_id is not None
        moment = self._monotonic()
        last = self._polled.get(part.part_key)
        if last is not None and moment - last < self.poll_interval_s and not stopping:
            return False
        self._polled[part.part_key] = moment
        state = await api.state(provider_id)
        if not state.ended:
            if stopping and state.status != "cancelling" and provider_id not in self._cancelled:
                await self._cancel(api.cancel, provider_id, batch)
            await self._seen(batch, part, state)
            return False
        lines = await self._lines(batch, part)
        results = await api.results(part.part_key, state, [line for _, line in lines])
        await self._end(batch, part, state, results, model=_model_of(lines))
        self._polled.pop(part.part_key, None)
        return True

    async def _find(
        self, batch: BatchRecord, api: NativeBatchApi, part: ProviderBatch
    ) -> str | None:
        """The provider batch of a part whose create outcome is unknown, recorded if found
        (raises errors.ProviderOutcomeUnknown while the provider cannot tell yet)."""
        since = part.created_at - dt.timedelta(seconds=provider_batch_send.CLOCK_SKEW_S)
        rows = await self.storage.provider_batches_of(batch_id=batch.id)
        known = frozenset(r.provider_batch_id for r in rows if r.provider_batch_id is not None)
        found = await api.parts.find_part(as_part(part), since=since, known_ids=known)
        if found is None:
            return None
        provider_id = str(found["id"])
        await self.storage.provider_batch_record(
            part_key=part.part_key, provider_batch_id=provider_id
        )
        return provider_id

    async def _lines(
        self, batch: BatchRecord, part: ProviderBatch
    ) -> list[tuple[int, batch_parts.Line]]:
        """The part's lines as it sent them, in its order."""
        wanted = set(part.lines)
        found: dict[int, batch_parts.Line] = {}
        after = min(part.lines) - 1
        while len(found) < len(wanted):
            page = await self.storage.batch_native_lines(
                batch_id=batch.id, after_line=after, limit=LINES_PAGE
            )
            for item in page:
                if item.line in wanted:
                    found[item.line] = part_line(item.line, batch.endpoint, item.request)
            if len(page) < LINES_PAGE or page[-1].line >= max(part.lines):
                break
            after = page[-1].line
        missing = wanted - found.keys()
        if missing:  # a bug: the part names lines the batch does not hold
            raise ValueError(
                f"part {part.part_key} names lines the batch lacks: {sorted(missing)[:5]}"
            )
        return [(line, found[line]) for line in part.lines]

    async def _cancel(
        self, cancel: Callable[[str], Any], provider_id: str, batch: BatchRecord
    ) -> None:
        try:
            await cancel(provider_id)
        except errors.ProviderFatal as exc:  # it ended meanwhile: the next look reads it
            log.info("provider batch cancel refused: %s", exc.code, extra={"batch_id": batch.id})
        self._cancelled.add(provider_id)
        log.info("provider batch cancel", extra={"batch_id": batch.id})

    async def _seen(self, batch: BatchRecord, part: ProviderBatch, state: PartStatus) -> None:
        assert batch.lease_token is not None
        await self.storage.provider_batch_seen(
            part_key=part.part_key,
            lease_token=batch.lease_token,
            status=state.status,
            request_counts=_counts(state),
        )

    async def _end(
        self,
        batch: BatchRecord,
        part: ProviderBatch,
        state: PartStatus,
        results: list[LineBack],
        *,
        model: str | None = None,
    ) -> None:
        """Write the ended part's lines back (raises batch_results.LeaseLost once another
        pass holds the batch)."""
        assert batch.lease_token is not None
        expired = batch.final_status == BatchStatus.EXPIRED
        native = [
            _native_result(line, result, expired=expired)
            for line, result in zip(part.lines, results, strict=True)
        ]
        ending = PartEnding(
            part_key=part.part_key,
            batch_id=batch.id,
            tenant_id=batch.tenant_id,
            lease_token=batch.lease_token,
            status=state.status,
            request_counts=_counts(state),
            results=native,
            provider=part.provider,
            model=model,
        )
        if not await self.storage.provider_batch_end(ending=ending):
            raise batch_results.LeaseLost(batch.id)
        log.info(
            "provider batch read back",
            extra={
                "batch_id": batch.id,
                "provider": part.provider,
                "to_state": state.status,
                "count": len(native),
            },
        )


def _never_created(batch: BatchRecord) -> PartStatus:
    status = "expired" if batch.final_status == BatchStatus.EXPIRED else "cancelled"
    return PartStatus(status, True, RequestCounts(), {})


def _not_sent(part: ProviderBatch) -> list[LineBack]:
    """A part never created (or that cannot be read): each line an error line saying it did
    not run."""
    ids = [custom_id(line) for line in part.lines]
    lines = provider_batch_results.lines_back(ids, status="cancelled", output=b"", errors=b"")
    return [LineBack(result.line, False, None) for result in lines]


def _model_of(lines: list[tuple[int, batch_parts.Line]]) -> str | None:
    """The model the part's lines were sent for (a batch's lines name one model)."""
    body = lines[0][1].get("body") if lines else None
    model = body.get("model") if isinstance(body, dict) else None
    return model if isinstance(model, str) else None


def _counts(state: PartStatus) -> dict[str, int]:
    counts = state.counts
    return {"total": counts.total, "completed": counts.completed, "failed": counts.failed}


def _native_result(line: int, result: LineBack, *, expired: bool) -> NativeResult:
    """A part's line as the batch keeps it: its outcome, its file line without the custom_id
    (the caller's is put back when the files are written) and, when it succeeded, its usage.
    A line that did not run because its batch expired reads `batch_expired`, whatever ended
    its provider batch (jobgate's expiry cancels it)."""
    body = {key: value for key, value in result.line.items() if key != "custom_id"}
    if result.succeeded:
        usage = result.usage
        return NativeResult(
            line,
            "succeeded",
            body,
            input_tokens=usage.input_tokens if usage else 0,
            output_tokens=usage.output_tokens if usage else 0,
            cached_tokens=usage.cache_read_input_tokens if usage else 0,
        )
    error = body.get("error")
    code = error.get("code") if isinstance(error, dict) else None
    if body.get("response") is None and code in _NOT_RUN_CODES:
        if expired and isinstance(error, dict):
            expired_code, message = batch_rules.NOT_RUN["expired"]
            body["error"] = {**error, "code": expired_code, "message": message}
        return NativeResult(line, "not_run", body)
    return NativeResult(line, "failed", body)
