"""PauseStore on both dialects: the operator's holds on claims (the claims apply them in SQL,
through the `pause_covers` fragment)."""

from __future__ import annotations

from datetime import datetime

from jobgate.storage.executor import SqlPart
from jobgate.storage.records import Pause


class PauseQueries(SqlPart):
    async def pause_insert(
        self,
        *,
        pause_id: str,
        provider: str | None,
        model: str | None,
        tenant_id: str | None,
        reason: str | None,
        created_by: str,
        now: datetime | None = None,
    ) -> Pause:
        row = await self._sql.write_one(
            "pause_insert",
            id=pause_id,
            provider=provider,
            model=model,
            tenant_id=tenant_id,
            reason=reason,
            created_by=created_by,
            now=self._sql.codec.now(now),
        )
        assert row is not None
        return self._decode.record(Pause, row)

    async def pause_list(self) -> list[Pause]:
        return [self._decode.record(Pause, row) for row in await self._sql.read("pause_list")]

    async def pause_delete(self, *, pause_id: str | None) -> list[Pause]:
        rows = (
            await self._sql.write("pause_delete_all")
            if pause_id is None
            else await self._sql.write("pause_delete", id=pause_id)
        )
        if rows:  # the paused jobs are claimable again (other processes: NOTIFY or polling)
            self.changes.work_available()
        return [self._decode.record(Pause, row) for row in rows]
