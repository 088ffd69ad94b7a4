"""The base of the package's enumerations of names (strategies, roles, splits, tasks)."""
from __future__ import annotations

from enum import Enum


class Name(str, Enum):
    """A name that is a plain string wherever it goes: compared, hashed, formatted (`!r` too), sent as JSON."""

    def __str__(self) -> str:
        return self.value

    def __repr__(self) -> str:
        return repr(self.value)

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)
