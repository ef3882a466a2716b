"""Predictable ids: prefix_000001, prefix_000002, ..."""

from __future__ import annotations

import itertools


class SequentialIds:
    def __init__(self) -> None:
        self._counter = itertools.count(1)

    def new(self, prefix: str) -> str:
        return f"{prefix}_{next(self._counter):06d}"

    def new_many(self, prefix: str, count: int) -> list[str]:
        return [self.new(prefix) for _ in range(count)]
