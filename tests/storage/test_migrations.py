"""Both dialects ship the same migration versions; the SQL blocks parse and agree."""

from __future__ import annotations

from jobgate.storage import migrations, sql


def test_dialects_have_the_same_versions() -> None:
    sqlite = [(m.version, m.name) for m in migrations.available("jobgate.storage.sqlite")]
    postgres = [(m.version, m.name) for m in migrations.available("jobgate.storage.postgres")]
    assert sqlite == postgres
    versions = [v for v, _ in sqlite]
    # Numbers are reserved per piece of work landing in parallel, so a lower one may land
    # after a higher one (a gap meanwhile): `pending` applies every version not applied yet,
    # wherever it falls. Each number is used once, from 1.
    assert versions[0] == 1 and versions == sorted(set(versions))


def test_query_blocks_have_descriptions() -> None:
    for package in ("jobgate.storage.sqlite", "jobgate.storage.postgres"):
        for query in sql.load(package).values():
            assert query.description, query.name


def test_positional_rewrite_keeps_casts() -> None:
    parsed = sql.parse("-- name: q\n-- d\nSELECT :a::int, :b, :a, '::x'")["q"]
    assert parsed.params == ("a", "b")
    assert parsed.positional_sql == "SELECT $1::int, $2, $1, '::x'"
