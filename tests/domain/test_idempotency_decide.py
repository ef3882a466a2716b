"""The idempotency rule of an insert (domain.idempotency.decide), held by properties over
arbitrary calls: which item is new, which replays, which conflicts, per tenant."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from jobgate.domain.idempotency import Decision, Scope, decide

Use = tuple[Scope, str] | None

scopes = st.tuples(
    st.sampled_from("ab"), st.sampled_from(["POST /v1/jobs", "bulk"]), st.sampled_from("xyz")
)
hashes = st.sampled_from(["h1", "h2"])
uses = st.lists(st.none() | st.tuples(scopes, hashes), max_size=12)
bindings = st.dictionaries(scopes, hashes, max_size=4)


@given(uses, bindings)
def test_an_item_without_a_key_is_new(items: list[Use], bound: dict[Scope, str]) -> None:
    decisions = decide(items, bound)
    assert len(decisions) == len(items)
    assert all(d is Decision.NEW for use, d in zip(items, decisions, strict=True) if use is None)


@given(uses, bindings)
def test_a_key_binds_once_to_its_first_use_unless_bound(
    items: list[Use], bound: dict[Scope, str]
) -> None:
    decisions = decide(items, bound)
    seen: set[Scope] = set()
    for use, decision in zip(items, decisions, strict=True):
        if use is None:
            continue
        scope = use[0]
        first_unbound = scope not in bound and scope not in seen
        assert (decision is Decision.NEW) == first_unbound
        seen.add(scope)


@given(uses, bindings)
def test_a_later_use_replays_the_same_body_and_conflicts_on_another(
    items: list[Use], bound: dict[Scope, str]
) -> None:
    decisions = decide(items, bound)
    first_body: dict[Scope, str] = {}
    for use in items:
        if use is not None:
            first_body.setdefault(use[0], use[1])
    for use, decision in zip(items, decisions, strict=True):
        if use is None or decision is Decision.NEW:
            continue
        scope, body = use
        held = bound.get(scope, first_body[scope])
        assert decision is (Decision.REPLAY if body == held else Decision.CONFLICT)


@given(uses, bindings, st.sampled_from("ab"))
def test_tenants_do_not_see_each_others_keys(
    items: list[Use], bound: dict[Scope, str], tenant: str
) -> None:
    mine = [i for i, use in enumerate(items) if use is not None and use[0][0] == tenant]
    alone = decide([items[i] for i in mine], {s: h for s, h in bound.items() if s[0] == tenant})
    together = decide(items, bound)
    assert alone == [together[i] for i in mine]


@given(uses, bindings, st.integers(min_value=0, max_value=12))
def test_each_item_is_decided_as_if_it_ran_alone_in_order(
    items: list[Use], bound: dict[Scope, str], cut: int
) -> None:
    assert decide(items[:cut], bound) == decide(items, bound)[:cut]


@given(uses, bindings)
def test_a_call_retried_whole_inserts_nothing_more(
    items: list[Use], bound: dict[Scope, str]
) -> None:
    first = decide(items, bound)
    after = dict(bound)
    for use, decision in zip(items, first, strict=True):
        if use is not None and decision is Decision.NEW:
            after[use[0]] = use[1]
    again = decide(items, after)
    for use, before, now in zip(items, first, again, strict=True):
        if use is not None:
            assert now is (Decision.CONFLICT if before is Decision.CONFLICT else Decision.REPLAY)
