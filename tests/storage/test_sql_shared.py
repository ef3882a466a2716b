"""The shared SQL set: a statement the dialects agree on is written once, in sql_shared/, and
each dialect loads it with its own fragments."""

from __future__ import annotations

import pytest

from jobgate.storage import sql

_PG = [("queries_dialect.sql", "-- fragment: now\n-- d\ncoalesce(:now::timestamptz, now())")]
_LITE = [("queries_dialect.sql", "-- fragment: now\n-- d\n:now")]


def _shared(text: str) -> list[tuple[str, str]]:
    return [("queries_x.sql", text)]


def test_a_shared_statement_reads_each_dialects_fragments() -> None:
    composed = sql.compose(
        _shared("-- name: q\n-- d\nDELETE FROM s WHERE t < {{now}} AND id = :id"),
        {"pg": _PG, "lite": _LITE},
    )
    postgres = composed["pg"]["q"]
    assert postgres.sql == "DELETE FROM s WHERE t < coalesce(:now::timestamptz, now()) AND id = :id"
    assert postgres.positional_sql.endswith("coalesce($1::timestamptz, now()) AND id = $2")
    assert composed["lite"]["q"].sql == "DELETE FROM s WHERE t < :now AND id = :id"
    assert composed["lite"]["q"].params == ("now", "id")


def test_a_dialect_keeps_its_own_statements() -> None:
    composed = sql.compose(
        _shared("-- name: q\n-- d\nSELECT 1"),
        {"pg": [*_PG, ("queries.sql", "-- name: p\n-- d\nSELECT 2")], "lite": _LITE},
    )
    assert sorted(composed["pg"]) == ["p", "q"]
    assert sorted(composed["lite"]) == ["q"]


def test_a_statement_in_the_shared_set_and_a_dialect_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"queries\.sql: q is defined twice \(also in queries_x"):
        sql.compose(
            _shared("-- name: q\n-- d\nSELECT 1"),
            {"pg": _PG, "lite": [*_LITE, ("queries.sql", "-- name: q\n-- d\nSELECT 1")]},
        )


def test_a_fragment_in_the_shared_set_and_a_dialect_is_an_error() -> None:
    with pytest.raises(ValueError, match="now is defined twice"):
        sql.compose(_shared("-- fragment: now\n-- d\nnow()"), {"pg": _PG, "lite": _LITE})


def test_a_name_defined_twice_within_a_dialect_is_an_error() -> None:
    twice = [("a.sql", "-- fragment: f\n-- d\n1"), ("b.sql", "-- name: f\n-- d\nSELECT 2")]
    with pytest.raises(ValueError, match="f is defined twice"):
        sql.compose([], {"pg": twice})


def test_a_shared_statement_needing_a_fragment_one_dialect_lacks_is_an_error() -> None:
    lacking = r"shared q does not compile for lite: .*no fragment 'now'"
    with pytest.raises(ValueError, match=lacking):
        sql.compose(
            _shared("-- name: q\n-- d\nSELECT {{now}}"), {"pg": _PG, "lite": [("x.sql", "")]}
        )


def test_a_shared_fragment_is_checked_even_when_no_statement_includes_it() -> None:
    with pytest.raises(ValueError, match="shared f does not compile for lite"):
        sql.compose(_shared("-- fragment: f\n-- d\n{{now}}"), {"pg": _PG, "lite": [("x.sql", "")]})


def test_the_loaded_files_are_named_by_their_folder() -> None:
    assert all(source.startswith("sql_shared/queries") for source, _ in sql.shared_files())
    assert all(
        source.startswith("sqlite/queries") for source, _ in sql.dialect_files(sql.DIALECTS[1])
    )


def test_every_dialect_loads_every_shared_statement() -> None:
    shared = sql.statement_names(sql.shared_files())
    assert shared
    for package in sql.DIALECTS:
        assert shared <= set(sql.load(package)), package


def test_no_dialect_keeps_a_statement_the_other_writes_the_same() -> None:
    """A statement both dialects would write to the letter (after their fragments) belongs in
    the shared set: two copies drift apart."""
    own = {package: sql.statement_names(sql.dialect_files(package)) for package in sql.DIALECTS}
    loaded = {package: sql.load(package) for package in sql.DIALECTS}
    postgres, sqlite = sql.DIALECTS
    twins = sorted(
        name
        for name in own[postgres] & own[sqlite]
        if loaded[postgres][name].sql == loaded[sqlite][name].sql
    )
    assert twins == []
