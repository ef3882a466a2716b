"""Pauses: an operator holds back the claims of a provider, a model and/or a tenant. The pause
is a row the claim statements read themselves, so it takes effect in every worker process at
its commit and survives restarts; queued jobs stay queued (nothing is lost or counted as an
attempt) and running ones finish. Deleting it resumes the scope and wakes the workers."""

from __future__ import annotations

import dataclasses
import logging
from typing import Protocol

from jobgate import errors
from jobgate.ids import IdGenerator
from jobgate.providers.registry import ProviderRegistry
from jobgate.storage.protocol import PauseStore, TenantReadStore
from jobgate.storage.records import Pause

log = logging.getLogger(__name__)

PREFIX = "pause"
MAX_REASON_CHARS = 500
MAX_NAME_CHARS = 200  # a provider, model or tenant name


class PauseStorage(PauseStore, TenantReadStore, Protocol):
    """What pauses reach: their rows, and tenants by name and id."""


@dataclasses.dataclass(frozen=True, slots=True)
class Scope:
    """What a pause covers, as an operator names it (tenant by name); None: anything."""

    provider: str | None = None
    model: str | None = None
    tenant: str | None = None


class PauseService:
    def __init__(
        self, *, storage: PauseStorage, providers: ProviderRegistry, ids: IdGenerator
    ) -> None:
        self._storage = storage
        self._providers = providers
        self._ids = ids

    async def pause(self, scope: Scope, *, reason: str | None, operator: str) -> Pause:
        """Store a pause of `scope`; errors.InvalidRequest for a provider, model or tenant no
        job could have (errors.UnknownProvider for a provider that is not configured)."""
        _check_text(reason, "reason", MAX_REASON_CHARS)
        for param in ("provider", "model", "tenant"):
            _check_text(getattr(scope, param), param, MAX_NAME_CHARS, empty=False)
        if scope.provider is not None and scope.provider not in self._providers.names():
            raise errors.UnknownProvider(scope.provider)
        if scope.model is not None:
            self._check_model(scope.provider, scope.model)
        tenant_id = None
        if scope.tenant is not None:
            tenant = await self._storage.tenant_get(name=scope.tenant)
            if tenant is None:
                raise errors.InvalidRequest(
                    f"no tenant named {scope.tenant!r}", param="tenant", code="unknown_tenant"
                )
            tenant_id = tenant.id
        pause = await self._storage.pause_insert(
            pause_id=self._ids.new(PREFIX),
            provider=scope.provider,
            model=scope.model,
            tenant_id=tenant_id,
            reason=reason,
            created_by=operator,
        )
        log.warning(
            "claims paused",
            extra={
                "pause_id": pause.id,
                "provider": scope.provider,
                "model": scope.model,
                "tenant": scope.tenant,
                "operator": operator,
            },
        )
        return pause

    def _check_model(self, provider: str | None, model: str) -> None:
        names = [provider] if provider is not None else self._providers.names()
        if not any(self._providers.serves(name, model) for name in names):
            where = f"provider {provider!r}" if provider else "any configured provider"
            raise errors.InvalidRequest(
                f"model {model!r} is not served by {where}", param="model", code="model_not_found"
            )

    async def all(self) -> list[Pause]:
        return await self._storage.pause_list()

    async def resume(self, pause_id: str | None, *, operator: str) -> list[Pause]:
        """Delete the pause `pause_id` (None: every pause) and answer what was deleted;
        errors.NotFound for an id that names no pause."""
        resumed = await self._storage.pause_delete(pause_id=pause_id)
        if pause_id is not None and not resumed:
            raise errors.NotFound("pause", pause_id)
        for pause in resumed:
            log.warning("claims resumed", extra={"pause_id": pause.id, "operator": operator})
        return resumed

    async def tenant_names(self, pauses: list[Pause]) -> dict[str, str]:
        """The names of the tenants `pauses` name, by id (for their views)."""
        names: dict[str, str] = {}
        for tenant_id in {p.tenant_id for p in pauses if p.tenant_id is not None}:
            tenant = await self._storage.tenant_get(tenant_id=tenant_id)
            names[tenant_id] = tenant.name if tenant is not None else tenant_id
        return names


def _check_text(value: str | None, param: str, max_chars: int, *, empty: bool = True) -> None:
    if value is None:
        return
    if len(value) > max_chars:
        raise errors.InvalidRequest(f"{param} is longer than {max_chars} characters", param=param)
    if not empty and not value.strip():
        raise errors.InvalidRequest(
            f"{param} is empty: leave it out to match anything", param=param
        )
