"""The contract suite's files (test_contract.py, test_*_contract.py) run on a third backend,
`postgres-pgbouncer`: the same PostgreSQL clones reached through PgBouncer in transaction mode,
LISTEN on the direct URL (tests/conftest.py's `storage` fixture).

Why these files and not all of tests/storage: a pooler changes how a statement reaches the
server (unnamed, parsed at each call; a transaction's bounds set inside it; each transaction
on any server session), not what the statement does. The contract files call every storage
family and every transaction of several statements (admission locks, capped claims, bulk
actions, batches, schedules, retention, streams, webhooks), so each path the pooler could
break runs through it; the other files test PostgreSQL's plans, HOT updates, the executor's
own pool, row decoding or the SQLite engine, which a pooler does not change, and several open
their own direct connections beside the store.
"""

from __future__ import annotations

import re

import pytest

_THROUGH_PGBOUNCER = re.compile(r"test_(\w+_)?contract\.py$")
_BACKENDS = [
    "sqlite",
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("postgres-pgbouncer", marks=pytest.mark.postgres),
]


@pytest.hookimpl(tryfirst=True)  # before pytest reads the marks (they override the fixture's)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" not in metafunc.fixturenames:
        return
    if not _THROUGH_PGBOUNCER.search(str(metafunc.definition.path)):
        return
    chosen = any(
        "backend" in str(mark.args[0]) for mark in metafunc.definition.iter_markers("parametrize")
    )
    if not chosen:  # a test that names its backends keeps them
        metafunc.definition.add_marker(pytest.mark.parametrize("backend", _BACKENDS, indirect=True))
