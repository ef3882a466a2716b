"""`record`: the records built once or more per job, read-only to the type checker.

A frozen dataclass's `__init__` stores each field through `object.__setattr__`, a call per
field, which a Job of 45 fields, or the several records the worker builds per job, pay on every
build. A `record` is a slotted dataclass whose `__init__` stores each field directly, and which
mypy treats as frozen (`dataclass_transform(frozen_default=True)`): assigning a field is a type
error wherever the code is checked (src and tests, strict), though not refused at run time.
Equality, hashing (by value), `dataclasses.replace` and the constructor's signature are those
of a frozen dataclass of the same fields.
"""

from __future__ import annotations

import dataclasses
from typing import TypeVar, dataclass_transform

T = TypeVar("T")


@dataclass_transform(frozen_default=True)
def record(cls: type[T]) -> type[T]:
    """`cls` as a slotted dataclass that the type checker holds read-only (see the module)."""
    return dataclasses.dataclass(slots=True, unsafe_hash=True)(cls)
