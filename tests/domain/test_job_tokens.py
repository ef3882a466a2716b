"""Job tokens, the pure part: a signed grant verifies for its job and scopes until it expires,
and any other token (another secret, job or scope, a changed character, an expiry passed, a
generation revoked) verifies as nothing."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from jobgate.domain import job_tokens

SECRET = bytes(range(32))
OTHER = bytes(32)
GRANT = job_tokens.Grant("ten_1", "job_1", frozenset({"read", "stream"}), 2_000_000_000, 1)
TOKEN = job_tokens.sign(GRANT, SECRET)


def verify(token: str, *, job_id: str = "job_1", scope: str = "read", now_s: float = 0) -> bool:
    found = job_tokens.verify(token, secrets={1: SECRET}, job_id=job_id, scope=scope, now_s=now_s)
    return found is not None


def test_a_signed_grant_verifies_as_itself() -> None:
    assert TOKEN.startswith("jgt_") and len(TOKEN) < 200
    found = job_tokens.verify(TOKEN, secrets={1: SECRET}, job_id="job_1", scope="stream", now_s=0)
    assert found == GRANT


def test_it_verifies_until_its_expiry_excluded() -> None:
    assert verify(TOKEN, now_s=GRANT.expires_at - 0.001)
    assert not verify(TOKEN, now_s=GRANT.expires_at)


def test_only_for_its_job_and_scopes() -> None:
    assert not verify(TOKEN, job_id="job_2")
    assert not verify(TOKEN, job_id="job_1x")
    assert not verify(TOKEN, scope="cancel")
    assert not verify(TOKEN, scope="write")


def test_only_with_the_secret_of_its_generation() -> None:
    assert job_tokens.signed_grant(TOKEN, {1: OTHER}) is None
    assert job_tokens.signed_grant(TOKEN, {2: SECRET}) is None
    assert job_tokens.signed_grant(TOKEN, {}) is None


def test_the_oldest_usable_generation_is_the_newest_revoking_one() -> None:
    assert job_tokens.oldest_usable([]) == 0
    assert job_tokens.oldest_usable([(1, False), (2, False)]) == 0
    assert job_tokens.oldest_usable([(1, False), (2, True), (3, False), (4, True), (5, False)]) == 4


def test_scopes_are_shown_once_in_a_fixed_order() -> None:
    assert job_tokens.ordered(["cancel", "read", "cancel"]) == ["read", "cancel"]


@given(index=st.integers(min_value=0), char=st.sampled_from("AQgw_-.09z="))
def test_any_changed_character_verifies_as_nothing(index: int, char: str) -> None:
    position = index % len(TOKEN)
    changed = TOKEN[:position] + char + TOKEN[position + 1 :]
    if changed != TOKEN:
        assert job_tokens.signed_grant(changed, {1: SECRET}) is None


@given(
    tenant=st.from_regex(r"[A-Za-z0-9_-]{1,40}", fullmatch=True),
    job=st.from_regex(r"[A-Za-z0-9_-]{1,40}", fullmatch=True),
    scopes=st.sets(st.sampled_from(job_tokens.SCOPES), min_size=1),
    expires_at=st.integers(min_value=0, max_value=10**11),
    generation=st.integers(min_value=1, max_value=10**9),
)
def test_every_grant_round_trips(
    tenant: str, job: str, scopes: set[str], expires_at: int, generation: int
) -> None:
    grant = job_tokens.Grant(tenant, job, frozenset(scopes), expires_at, generation)
    token = job_tokens.sign(grant, SECRET)
    assert job_tokens.signed_grant(token, {generation: SECRET}) == grant


@given(text=st.text(max_size=300))
def test_any_text_is_a_token_or_nothing(text: str) -> None:
    assert job_tokens.signed_grant(text, {1: SECRET}) is None
    assert job_tokens.signed_grant("jgt_" + text, {1: SECRET}) is None
