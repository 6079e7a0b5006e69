"""Constraints a job puts on the workers it may run on: on labels (`gpu=h100`, `zone!=b`, `gpu in a100,h100`),
and the implicit ones of a job with `python` and of one that starts in a directory its files were not
uploaded from.

Label constraints are kept as their canonical text in the job spec, parsed into data for
matching. A worker without the label never equals a value, so `zone!=b` matches it and
`zone=b` does not.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from corral.core.pip import python_matches
from corral.core.workdir import shares


class Room(Protocol):
    """What a constraint reads of a worker (scheduling.rooms.WorkerRoom)."""

    labels: dict[str, str]
    pythons: tuple[str, ...]
    filesystem: str | None
    shared_fs: Sequence[str]

_KEY = r"[A-Za-z0-9][A-Za-z0-9_.\-/]*"
_VALUE = r"[A-Za-z0-9_.\-/:]+"
_FORMS = (
    (re.compile(rf"\s*({_KEY})\s*!=\s*({_VALUE})\s*"), "!="),
    (re.compile(rf"\s*({_KEY})\s*==?\s*({_VALUE})\s*"), "="),
    (re.compile(rf"\s*({_KEY})\s+in\s+\(?\s*({_VALUE}(?:\s*,\s*{_VALUE})*)\s*\)?\s*"), "in"),
)


@dataclass(frozen=True)
class Constraint:
    key: str
    op: str  # "=", "!=" or "in"
    values: tuple[str, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if self.op == "!=":
            return value != self.values[0]
        return value in self.values

    def admits(self, room: Room) -> bool:
        return self.matches(room.labels)

    def refusal(self, room: Room) -> str:
        """Why `room` is refused, for the placement analysis."""
        has = room.labels.get(self.key)
        label = f"has {self.key}={has}" if has is not None else f"has no label {self.key}"
        return f"{label}; the job needs {self}"

    def __str__(self) -> str:
        if self.op == "in":
            return f"{self.key} in {','.join(self.values)}"
        return f"{self.key}{self.op}{self.values[0]}"


def parse_constraint(text: str) -> Constraint:
    """`K=V`, `K!=V` or `K in A,B`; a ValueError says which forms exist."""
    for pattern, op in _FORMS:
        match = pattern.fullmatch(text)
        if match:
            values = tuple(v.strip() for v in match.group(2).split(","))
            return Constraint(match.group(1), op, values)
    raise ValueError(f"not a constraint: {text!r} (use K=V, K!=V or 'K in A,B')")


@dataclass(frozen=True)
class PythonConstraint:
    """A job with `python` runs only where that version can build its environment: 3.11 takes any 3.11.x."""

    version: str

    def admits(self, room: Room) -> bool:
        return any(python_matches(self.version, available) for available in room.pythons)

    def refusal(self, room: Room) -> str:
        return f"has no python {self.version} (has {', '.join(room.pythons) or 'none'})"

    def __str__(self) -> str:
        return f"python {self.version}"


@dataclass(frozen=True)
class SharedDirectory:
    """The implicit constraint of a job that starts in its submission directory and whose files were not
    uploaded: only workers that share that directory (corral.core.workdir.shares) may run it."""

    path: str
    filesystem: str

    def admits(self, room: Room) -> bool:
        return shares(self, room.filesystem, room.shared_fs)

    def refusal(self, room: Room) -> str:
        return f"does not share the file system of {self.path} (the job's files were not uploaded)"

    def __str__(self) -> str:
        return f"shares {self.path}"


AnyConstraint = Constraint | PythonConstraint | SharedDirectory
IMPLICIT = (PythonConstraint, SharedDirectory)  # derived from the spec, not written by the user
