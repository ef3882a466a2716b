"""Unknown setting names: a misspelt JOBGATE_* variable or jobgate.toml key is an error that
suggests the closest known name, rather than being silently ignored."""

from __future__ import annotations

import difflib
import typing
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pydantic

# JOBGATE_* variables that are not settings: read by the client, the tests, the benchmarks,
# the failpoints and the simulator. A new variable read outside config.py belongs here.
OTHER_VARIABLES = frozenset({
    "JOBGATE_CONFIG", "JOBGATE_URL", "JOBGATE_API_KEY", "JOBGATE_FAILPOINTS", "JOBGATE_PG_BINDIR",
})  # fmt: skip
OTHER_PREFIXES = ("JOBGATE_TEST_", "JOBGATE_BENCH_", "JOBGATE_FUZZ_", "JOBGATE_SIMULATOR_")


def did_you_mean(name: str, known: Iterable[str], *, prefix: str = "") -> str:
    """`; did you mean 'X'?` for the closest known name, or an empty string. A `prefix` that
    every name shares is left out of the comparison, so it does not make everything close."""
    by_stem = {candidate.removeprefix(prefix): candidate for candidate in known}
    close = difflib.get_close_matches(name.removeprefix(prefix), list(by_stem), n=1, cutoff=0.6)
    return f"; did you mean {by_stem[close[0]]!r}?" if close else ""


def variables_named_by(providers: Any) -> set[str]:
    """The variables a jobgate.toml `[providers.*]` table names (`api_key_env`, …)."""
    if not isinstance(providers, dict):
        return set()
    return {
        value
        for provider in providers.values()
        if isinstance(provider, dict)
        for key, value in provider.items()
        if key.endswith("_env") and isinstance(value, str)
    }


def unknown_variable(env: Mapping[str, str], settings_variables: Iterable[str]) -> str | None:
    """The first JOBGATE_* name in `env` that nothing reads, or None."""
    known = {*settings_variables, *OTHER_VARIABLES}
    return next(
        (
            name
            for name in sorted(env)
            if name.startswith("JOBGATE_")
            and name not in known
            and not name.startswith(OTHER_PREFIXES)
        ),
        None,
    )


def fields_at(model: type[pydantic.BaseModel], location: Sequence[str | int]) -> list[str]:
    """The field names of the model found at `location` (a validation error's `loc` without
    its last part), following nested models and `dict[str, Model]` tables."""
    current: Any = model
    expect_key = False
    for part in location:
        if expect_key:  # the table key (a provider or tenant name)
            expect_key = False
            continue
        if not (isinstance(current, type) and issubclass(current, pydantic.BaseModel)):
            return []
        field = current.model_fields.get(str(part))
        if field is None:
            return []
        annotation = field.annotation
        if typing.get_origin(annotation) is dict:
            current = typing.get_args(annotation)[1]
            expect_key = True
        else:
            current = annotation
    if isinstance(current, type) and issubclass(current, pydantic.BaseModel):
        return list(current.model_fields)
    return []
