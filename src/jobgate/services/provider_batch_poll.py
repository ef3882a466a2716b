"""Provider-native batches, the following side (for the batches role): each part sent is asked
how it stands (at most once per `poll_interval_s`), its status and request counts kept for
reads of the batch; a part that ended has its output and error files read back line by line
into the batch's lines, with its usage billed once, in one fenced transaction. A batch that is
cancelled or expires passes the cancel on to its live parts, resolves any part whose create
outcome is unknown (by the part's key, never by creating), and waits for them to end.

The database is the truth of which parts exist; the provider is the authority on each part's
state: nothing here decides a part ended without the provider saying so, save a part that was
never created.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections.abc import Callable
from typing import Any

from jobgate import errors
from jobgate.domain import batches as batch_rules
from jobgate.domain import provider_batch_results
from jobgate.domain.batches import BatchStatus
from jobgate.domain.provider_batch_results import LineResult, PartState
from jobgate.domain.provider_batches import RequestCounts
from jobgate.providers.base import openai_usage
from jobgate.services import batch_results, provider_batch_send
from jobgate.services.native_dispatch import NativeBatches, custom_id
from jobgate.storage.protocol import BatchRunnerStorage
from jobgate.storage.records import BatchRecord, NativeResult, PartEnding, ProviderBatch

log = logging.getLogger(__name__)

# A line the provider never ran because its batch was cancelled or expired counts as neither
# completed nor failed (as OpenAI counts); one whose batch failed, or that is missing from a
# completed batch's files, failed.
_NOT_RUN_CODES = frozenset(code for code, _ in batch_rules.NOT_RUN.values())


class PartFollower:
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
            log.warning(
                "provider batch of a provider without native batches now: not followed",
                extra={"batch_id": batch.id, "provider": part.provider},
            )
            return False
        if part.provider_batch_id is None:
            if not stopping:
                return False  # native_dispatch sends it (or finds it) first
            since = part.created_at - dt.timedelta(seconds=provider_batch_send.CLOCK_SKEW_S)
            found = await api.find(part.part_key, since=since)
            if found is None:  # never created: its lines did not run
                never = _never_created(batch)
                ids = [custom_id(line) for line in part.lines]
                lines = provider_batch_results.lines_back(
                    ids, status=never.status, output=b"", errors=b""
                )
                await self._end(batch, part, never, lines)
                return True
            await self.storage.provider_batch_record(
                part_key=part.part_key, provider_batch_id=found
            )
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
        status = _not_run_as(batch, state.status)
        ids = [custom_id(line) for line in part.lines]
        results = await api.results(state, ids, status=status)
        await self._end(batch, part, state, results)
        self._polled.pop(part.part_key, None)
        return True

    async def _cancel(
        self, cancel: Callable[[str], Any], provider_id: str, batch: BatchRecord
    ) -> None:
        try:
            await cancel(provider_id)
        except errors.ProviderFatal as exc:  # it ended meanwhile: the next look reads it
            log.info("provider batch cancel refused: %s", exc.code, extra={"batch_id": batch.id})
        self._cancelled.add(provider_id)
        log.info("provider batch cancel", extra={"batch_id": batch.id})

    async def _seen(self, batch: BatchRecord, part: ProviderBatch, state: PartState) -> None:
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
        state: PartState,
        results: list[LineResult],
    ) -> None:
        """Write the ended part's lines back (raises batch_results.LeaseLost once another
        pass holds the batch)."""
        assert batch.lease_token is not None
        native = [
            _native_result(line, result) for line, result in zip(part.lines, results, strict=True)
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
            model=await self._model(batch, part),
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

    async def _model(self, batch: BatchRecord, part: ProviderBatch) -> str | None:
        """The model the part's lines were sent for (a batch's lines name one model)."""
        if not part.lines:
            return None
        first = await self.storage.batch_native_lines(
            batch_id=batch.id, after_line=part.lines[0] - 1, limit=1
        )
        model = first[0].request.get("model") if first else None
        return model if isinstance(model, str) else None


def _not_run_as(batch: BatchRecord, status: str) -> str:
    """How a part's lines that did not run read: a part this batch's expiry cancelled reads
    as expired, as the batch does."""
    if status == "cancelled" and batch.final_status == BatchStatus.EXPIRED:
        return "expired"
    return status


def _never_created(batch: BatchRecord) -> PartState:
    status = "expired" if batch.final_status == BatchStatus.EXPIRED else "cancelled"
    return PartState(status, RequestCounts(), None, None)


def _counts(state: PartState) -> dict[str, int]:
    counts = state.counts
    return {"total": counts.total, "completed": counts.completed, "failed": counts.failed}


def _native_result(line: int, result: LineResult) -> NativeResult:
    """A part's line as the batch keeps it: its outcome, its file line without the custom_id
    (the caller's is put back when the files are written) and, when it succeeded, its usage."""
    body = {key: value for key, value in result.line.items() if key != "custom_id"}
    if result.succeeded:
        response = result.line.get("response") or {}
        answer = response.get("body") if isinstance(response, dict) else None
        usage = openai_usage(answer.get("usage") if isinstance(answer, dict) else None)
        return NativeResult(
            line,
            "succeeded",
            body,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cached_tokens=usage.cache_read_input_tokens,
        )
    error = result.line.get("error")
    code = error.get("code") if isinstance(error, dict) else None
    not_run = result.line.get("response") is None and code in _NOT_RUN_CODES
    return NativeResult(line, "not_run" if not_run else "failed", body)
