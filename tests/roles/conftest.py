"""Fixtures of the roles' tests."""

from __future__ import annotations

import pytest

from jobgate.process.runtime import Runtime
from tests.support.scripted_jobs import ScriptedTenant


@pytest.fixture
async def acme(runtime: Runtime) -> ScriptedTenant:
    """The tenant `acme`, its jobs chat calls to the scripted provider."""
    return await ScriptedTenant.create(runtime)
