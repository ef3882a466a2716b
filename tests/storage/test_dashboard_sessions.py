"""Dashboard sessions on both backends: opened only for a live operator key, stored as a hash,
ended by expiry, sign-out or the key's revocation."""

from __future__ import annotations

from datetime import timedelta

from jobgate.services.tenants import hash_key
from jobgate.storage.protocol import Storage
from jobgate.testing import FakeClock


async def _operator(storage: Storage, name: str = "ada") -> str:
    key = f"jgo_key_of_{name}"
    await storage.operator_key_create(
        key_id=f"opk_{name}", name=name, key_hash=hash_key(key), key_prefix=key[:10]
    )
    return key


async def test_a_session_opens_for_a_live_key_only(storage: Storage, clock: FakeClock) -> None:
    key = await _operator(storage)
    now = clock.now()
    opened = await storage.dashboard_session_create(
        id_hash="h1", key_hash=hash_key(key), ttl_s=60, now=now
    )
    assert opened == "ada"
    refused = await storage.dashboard_session_create(
        id_hash="h2", key_hash=hash_key("jgo_wrong"), ttl_s=60, now=now
    )
    assert refused is None
    assert await storage.dashboard_session_operator(id_hash="h1", now=now) == "ada"
    assert await storage.dashboard_session_operator(id_hash="h2", now=now) is None


async def test_a_session_ends_at_its_expiry_and_at_sign_out(
    storage: Storage, clock: FakeClock
) -> None:
    key = await _operator(storage)
    now = clock.now()
    for id_hash in ("a", "b"):
        await storage.dashboard_session_create(
            id_hash=id_hash, key_hash=hash_key(key), ttl_s=60, now=now
        )
    later = now + timedelta(seconds=61)
    assert await storage.dashboard_session_operator(id_hash="a", now=later) is None
    assert await storage.dashboard_session_operator(id_hash="b", now=now) == "ada"
    await storage.dashboard_session_delete(id_hash="b")
    await storage.dashboard_session_delete(id_hash="b")  # idempotent
    assert await storage.dashboard_session_operator(id_hash="b", now=now) is None
    # Opening a session forgets the expired ones.
    await storage.dashboard_session_create(id_hash="c", key_hash=hash_key(key), ttl_s=60, now=later)
    assert await storage.dashboard_session_operator(id_hash="a", now=now) is None
