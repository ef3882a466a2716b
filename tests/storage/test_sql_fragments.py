"""Shared SQL fragments: a rule that several statements apply lives in one block per dialect."""

from __future__ import annotations

import pytest

from jobgate.storage import sql


def test_a_fragment_is_included_and_is_not_a_query() -> None:
    queries = sql.parse(
        "-- fragment: live\n-- d\nstate <> 'done'\n\n"
        "-- name: q\n-- d\nSELECT id FROM jobs WHERE {{live}} AND id = :id"
    )
    assert list(queries) == ["q"]
    assert queries["q"].sql == "SELECT id FROM jobs WHERE state <> 'done' AND id = :id"
    assert queries["q"].params == ("id",)


def test_an_unknown_fragment_is_an_error() -> None:
    with pytest.raises(ValueError, match="no fragment 'nope'"):
        sql.parse("-- name: q\n-- d\nSELECT {{nope}}")


def test_a_fragment_may_include_another() -> None:
    queries = sql.parse(
        "-- fragment: all\n-- d\nid, {{rest}}\n\n"
        "-- fragment: rest\n-- d\nstate\n\n"
        "-- name: q\n-- d\nSELECT {{all}} FROM jobs"
    )
    assert queries["q"].sql == "SELECT id, state FROM jobs"


def test_a_fragment_including_itself_is_an_error() -> None:
    with pytest.raises(ValueError, match="fragment 'a' includes itself"):
        sql.parse(
            "-- fragment: a\n-- d\nx {{b}}\n\n-- fragment: b\n-- d\ny {{a}}\n\n"
            "-- name: q\n-- d\nSELECT {{a}}"
        )


@pytest.mark.parametrize("package", ["jobgate.storage.sqlite", "jobgate.storage.postgres"])
def test_finish_and_settle_share_the_retry_after_cancel_rule(package: str) -> None:
    queries = sql.load(package)
    rule = "state = CASE WHEN v.state = 'queued' AND j.cancel_requested_at IS NOT NULL THEN"
    for name in ("job_finish", "job_settle"):
        assert rule in " ".join(queries[name].sql.split()), name
        assert "{{" not in queries[name].sql
