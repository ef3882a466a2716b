"""The limits per concurrency key in jobgate.toml (`[tenants.NAME]`, `[tenant_defaults]`): in
range they load as written; negative, huge, fractional, quoted, boolean and non-finite values
are refused by the loader with one message naming the field; 0 means no limit. The per-key
budget rule itself: at the budget is over it, the token budget named first."""

from __future__ import annotations

import tempfile
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobgate import errors
from jobgate.config import MAX_DAILY_COST_USD, MAX_DAILY_TOKENS, MAX_RPM, load_settings
from jobgate.domain import limits as rules

INTEGERS = {"rpm_per_key": MAX_RPM, "daily_token_budget_per_key": MAX_DAILY_TOKENS}
COST = "daily_cost_budget_usd_per_key"


def load(tmp_path: Path, table: str, line: str) -> object:
    config = tmp_path / "jobgate.toml"
    config.write_text(f"[{table}]\n{line}\n")
    return load_settings({}, config_path=config)


def limits_of(tmp_path: Path, line: str) -> object:
    return load(tmp_path, "tenants.acme", line).limits_for("acme")  # type: ignore[attr-defined]


def test_they_load_for_a_tenant_and_as_defaults(tmp_path: Path) -> None:
    config = tmp_path / "jobgate.toml"
    config.write_text(
        "[tenant_defaults]\nrpm_per_key = 6\n\n"
        "[tenants.acme]\nrpm_per_key = 60\ndaily_token_budget_per_key = 50000\n"
        "daily_cost_budget_usd_per_key = 0.25\nmax_running_per_key = 2\n"
    )
    loaded = load_settings({}, config_path=config)
    acme = loaded.limits_for("acme")
    assert (acme.rpm_per_key, acme.daily_token_budget_per_key) == (60, 50_000)
    assert acme.daily_cost_budget_usd_per_key == 0.25 and acme.max_running_per_key == 2
    assert loaded.limits_for("anyone").rpm_per_key == 6
    assert loaded.limits_for("anyone").daily_token_budget_per_key == 0  # none


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(sorted(INTEGERS)), st.data())
def test_every_integer_in_range_loads(field: str, data: st.DataObject) -> None:
    value = data.draw(st.integers(min_value=0, max_value=INTEGERS[field]))
    with _tmp() as tmp:
        assert getattr(limits_of(tmp, f"{field} = {value}"), field) == value


@settings(max_examples=40, deadline=None)
@given(st.floats(min_value=0, max_value=MAX_DAILY_COST_USD, allow_nan=False))
def test_every_cost_in_range_loads(value: float) -> None:
    with _tmp() as tmp:
        assert getattr(limits_of(tmp, f"{COST} = {value!r}"), COST) == value


def out_of_range(field: str) -> st.SearchStrategy[str]:
    """What an integer limit may not be, as written in TOML."""
    return st.one_of(
        st.integers(min_value=-(2**63), max_value=-1).map(str),
        st.integers(min_value=INTEGERS[field] + 1, max_value=2**63 - 1).map(str),
        st.floats(allow_nan=False, allow_infinity=False)
        .filter(lambda v: not v.is_integer())
        .map(repr),
        st.sampled_from(['"10"', '"many"', "true", "false", "nan", "inf", "-inf", "[1]"]),
    )


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(sorted(INTEGERS)), st.data())
def test_an_integer_limit_out_of_range_is_refused_naming_it(
    field: str, data: st.DataObject
) -> None:
    raw = data.draw(out_of_range(field))
    with _tmp() as tmp, pytest.raises(errors.ConfigError, match=field):
        limits_of(tmp, f"{field} = {raw}")


@settings(max_examples=60, deadline=None)
@given(
    st.one_of(
        st.floats(max_value=-1e-9, allow_infinity=False, allow_nan=False).map(repr),
        st.floats(min_value=MAX_DAILY_COST_USD * 1.001, allow_infinity=False).map(repr),
        st.sampled_from(['"0.5"', "true", "nan", "inf", "-inf", "[0.5]"]),
    )
)
def test_a_cost_out_of_range_is_refused_naming_it(raw: str) -> None:
    with _tmp() as tmp, pytest.raises(errors.ConfigError, match=COST):
        limits_of(tmp, f"{COST} = {raw}")


@pytest.mark.parametrize("table", ["tenants.acme", "tenant_defaults"])
def test_a_misspelt_limit_is_refused_with_the_closest_name(tmp_path: Path, table: str) -> None:
    with pytest.raises(errors.ConfigError, match="did you mean"):
        load(tmp_path, table, "rpm_per_keys = 5")


def test_a_provider_name_with_a_colon_is_refused(tmp_path: Path) -> None:
    with pytest.raises(errors.ConfigError, match="provider name"):
        load(tmp_path, 'providers."key:acme"', 'kind = "sim"')


def test_the_budget_rule_at_its_edges() -> None:
    budgets = {"t": rules.KeyBudget(tokens=100, usd=Decimal("0.5"))}
    tokens = {("t", "at"): 100, ("t", "below"): 99, ("t", "priced"): 1, ("u", "x"): 10**9}
    spend = {("t", "priced"): Decimal("0.5"), ("t", "below"): Decimal("0.4999999")}
    assert rules.keys_over_budget(budgets, tokens, spend) == {
        ("t", "at"): "daily_token_budget_per_key",
        ("t", "priced"): "daily_cost_budget_usd_per_key",
    }
    none = {"t": rules.KeyBudget(tokens=0, usd=Decimal(0))}  # 0: no budget
    assert rules.keys_over_budget(none, tokens, spend) == {}


class _tmp:
    """A fresh directory per Hypothesis example (tmp_path is one per test)."""

    def __enter__(self) -> Path:
        self._dir = tempfile.TemporaryDirectory()
        return Path(self._dir.name)

    def __exit__(self, *exc: object) -> None:
        self._dir.cleanup()
