"""Provider-native batches, the sending side (for the batches role): which of a batch's lines go
to a provider's own batch API instead of becoming jobs, and, once every line is expanded, the
parts they are split into (domain.provider_batches.plan) sent one by one, crash-safe
(roles.provider_batch_send).

The parts already written are taken as they stand (their lines, their keys) and only the lines
no part holds are planned, numbered after them: a process that restarts with other limits never
sends a line twice. A line is named in its part by its line number (`custom_id`), so that its
result maps back to the caller's line whatever the caller's custom_id holds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from jobgate import errors
from jobgate.config import ProviderConfig
from jobgate.domain.job import NewJob
from jobgate.domain.provider_batches import Line, Part, plan
from jobgate.providers import batch_apis, batch_parts
from jobgate.providers.base import JSONObject
from jobgate.providers.batch_apis import NativeBatchApi
from jobgate.roles import batch_results, provider_batch_send
from jobgate.storage.protocol import BatchRunnerStorage
from jobgate.storage.records import BatchRecord, NativeResult, PartEnding, ProviderBatch
from jobgate.wire import openai_batch_results as provider_batch_results

log = logging.getLogger(__name__)

LINES_PAGE = 1_000
# Parts sent in one pass on a batch (each an upload of up to the provider's file size and a
# create): the others wait for the next pass, so a pass stays well within the batch's lease.
PARTS_PER_PASS = 4
ApiFor = Callable[[str, ProviderConfig], NativeBatchApi | None]


def custom_id(line: int) -> str:
    """A line's custom_id in its provider batch: its number in the caller's input file."""
    return f"line-{line}"


class NativeBatches:
    """The batch APIs of the providers configured with `native_batches`, built on first use
    (`configs`: every provider's configuration by name)."""

    def __init__(
        self,
        *,
        storage: BatchRunnerStorage,
        configs: Mapping[str, ProviderConfig],
        api_for: ApiFor = batch_apis.api_for,
    ) -> None:
        self.storage = storage
        self._configs = dict(configs)
        self._api_for = api_for
        self._apis: dict[str, NativeBatchApi | None] = {}
        self._sent: set[str] = set()  # batches whose every part this process saw sent
        # Without a provider that has native batches, no batch has parts: nothing to look at.
        self.enabled = any(config.native_batches for config in self._configs.values())

    def api(self, provider: str) -> NativeBatchApi | None:
        """The provider's batch API (None: its lines run as jobs)."""
        if provider not in self._apis:
            config = self._configs.get(provider)
            self._apis[provider] = None if config is None else self._api_for(provider, config)
        return self._apis[provider]

    def serves(self, provider: str, endpoint: str) -> bool:
        """Whether the provider's native batches take lines of `endpoint`."""
        api = self.api(provider)
        return api is not None and api.serves(endpoint)

    def takes(self, job: NewJob) -> NativeBatchApi | None:
        """The batch API a batch line prepared as `job` goes to (None: it runs as the job)."""
        api = self.api(job.provider)
        return api if api is not None and api.serves(job.endpoint) else None

    def fits(self, api: NativeBatchApi, request: JSONObject, endpoint: str, line: int) -> bool:
        """Whether the line (number `line`) fits in one of the provider's batches at all;
        errors.InvalidRequest when the provider's batches cannot take it."""
        size = api.size(part_line(line, endpoint, request))
        bound = api.limits
        return bound.envelope_bytes + size + bound.per_line_bytes <= bound.max_bytes

    async def dispatch(self, batch: BatchRecord) -> bool:
        """Send every part of the batch not sent yet; True once all are (False: a provider
        did not answer, or its answer is unknown: the next pass tries again)."""
        if not self.enabled or batch.id in self._sent:
            return True
        written = await self.storage.provider_batches_of(batch_id=batch.id)
        encoded, lines = await self._lines(batch)
        parts = [as_part(row) for row in written] + self._planned(batch, written, lines)
        known = {row.provider_batch_id for row in written if row.provider_batch_id is not None}
        sent = True
        tried = 0
        for part in parts:
            row = next((w for w in written if w.part_key == part.key), None)
            if row is not None and (row.provider_batch_id is not None or row.collected_at):
                continue
            if tried == PARTS_PER_PASS:
                return False  # the rest next pass: a pass ends well within its lease
            tried += 1
            if not await self._send(batch, part, encoded, known):
                sent = False
        if sent:
            self._sent.add(batch.id)
        return sent

    def forget(self, batch_id: str) -> None:
        self._sent.discard(batch_id)

    async def _lines(self, batch: BatchRecord) -> tuple[dict[int, batch_parts.Line], list[Line]]:
        """Each native line as its part sends it, and the lines as the planner takes them."""
        encoded: dict[int, batch_parts.Line] = {}
        lines: list[Line] = []
        after = 0
        while True:
            page = await self.storage.batch_native_lines(
                batch_id=batch.id, after_line=after, limit=LINES_PAGE
            )
            for item in page:
                api = self.api(item.provider)
                if api is None:
                    raise errors.ConfigError(
                        f"providers.{item.provider}.native_batches",
                        "the batch has lines for this provider's batches, but it has none now",
                    )
                sent = part_line(item.line, batch.endpoint, item.request)
                encoded[item.line] = sent
                lines.append(Line(item.line, item.provider, api.size(sent)))
            if len(page) < LINES_PAGE:
                return encoded, lines
            after = page[-1].line

    def _planned(
        self, batch: BatchRecord, written: list[ProviderBatch], lines: list[Line]
    ) -> list[Part]:
        """The parts of the lines no written part holds, numbered after the written ones."""
        held = {line for row in written for line in row.lines}
        rest = [line for line in lines if line.line not in held]
        if not rest:
            return []
        providers = {line.provider for line in rest}
        limits = {}
        for name in providers:
            api = self.api(name)
            assert api is not None  # _lines refused a line without one
            limits[name] = api.limits
        planned = plan(batch.id, rest, {name: name for name in providers}, limits=limits)
        if planned.oversized:  # refused when expanded: a bug if one is here
            raise ValueError(f"lines too large for a provider batch: {planned.oversized[:5]}")
        made = {name: sum(1 for row in written if row.provider == name) for name in providers}
        return [
            Part(p.batch_id, p.provider, p.index + made[p.provider], p.lines, p.size_bytes)
            for p in planned.parts
        ]

    async def _send(
        self,
        batch: BatchRecord,
        part: Part,
        encoded: dict[int, batch_parts.Line],
        known: set[str],
    ) -> bool:
        """Send one part; True once it has its provider batch (or was refused, its lines
        failed). `known`: the provider batch ids of the batch's other parts."""
        api = self.api(part.provider)
        assert api is not None
        lines = [encoded[line] for line in part.lines]
        try:
            sent = await provider_batch_send.send_part(
                self.storage, api.parts, part, lines=lines, known_ids=frozenset(known)
            )
        except (
            errors.ProviderRetryable,
            errors.ProviderRateLimited,
            errors.ProviderOutcomeUnknown,
        ) as exc:
            log.warning(
                "provider batch not sent yet: %s",
                type(exc).__name__,
                extra={"batch_id": batch.id, "provider": part.provider},
            )
            return False
        except errors.ProviderFatal as exc:
            await self._refused(batch, part, exc)
            return True
        if sent.provider_batch_id is not None:
            known.add(sent.provider_batch_id)
        log.info(
            "provider batch sent",
            extra={"batch_id": batch.id, "provider": part.provider, "count": len(part.lines)},
        )
        return True

    async def _refused(self, batch: BatchRecord, part: Part, exc: errors.ProviderFatal) -> None:
        """A part the provider refused outright (nothing created): its lines fail."""
        log.warning(
            "provider batch refused: %s",
            exc.code,
            extra={"batch_id": batch.id, "provider": part.provider},
        )
        ids = [custom_id(line) for line in part.lines]
        results = provider_batch_results.lines_back(ids, status="failed", output=b"", errors=b"")
        assert batch.lease_token is not None
        ending = PartEnding(
            part_key=part.key,
            batch_id=batch.id,
            tenant_id=batch.tenant_id,
            lease_token=batch.lease_token,
            status="failed",
            request_counts={"total": len(part.lines), "completed": 0, "failed": len(part.lines)},
            results=[
                NativeResult(line, "failed", _without_custom_id(result.line))
                for line, result in zip(part.lines, results, strict=True)
            ],
            provider=part.provider,
            model=None,
        )
        if not await self.storage.provider_batch_end(ending=ending):
            raise batch_results.LeaseLost(batch.id)

    async def aclose(self) -> None:
        for api in self._apis.values():
            if api is not None:
                await api.aclose()
        self._apis.clear()


def as_part(row: ProviderBatch) -> Part:
    """A written part as the planner made it (its size not kept)."""
    index = int(row.part_key.rsplit(".", 1)[1])
    return Part(row.batch_id, row.provider, index, row.lines, 0)


def part_line(line: int, endpoint: str, request: JSONObject) -> batch_parts.Line:
    """A native line as its part sends it: the caller's form, named by its line number."""
    return {"custom_id": custom_id(line), "method": "POST", "url": endpoint, "body": request}


def _without_custom_id(line: dict[str, object]) -> dict[str, object]:
    return {key: value for key, value in line.items() if key != "custom_id"}
