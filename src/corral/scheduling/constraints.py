"""Label constraints a job puts on the workers it may run on: `gpu=h100`, `zone!=b`, `gpu in a100,h100`.

Kept as their canonical text in the job spec, parsed into data for matching. A worker
without the label never equals a value, so `zone!=b` matches it and `zone=b` does not.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from corral.core.workdir import shares

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

    def __str__(self) -> str:
        if self.op == "in":
            return f"{self.key} in {','.join(self.values)}"
        return f"{self.key}{self.op}{self.values[0]}"


@dataclass(frozen=True)
class SharedDirectory:
    """The implicit constraint of a job that starts in its submission directory and whose files were not
    uploaded: only workers that share that directory (corral.core.workdir.shares) may run it."""

    path: str
    filesystem: str

    def admits(self, filesystem: str | None, shared_fs: Sequence[str]) -> bool:
        return shares(self, filesystem, shared_fs)


def parse_constraint(text: str) -> Constraint:
    """`K=V`, `K!=V` or `K in A,B`; a ValueError says which forms exist."""
    for pattern, op in _FORMS:
        match = pattern.fullmatch(text)
        if match:
            values = tuple(v.strip() for v in match.group(2).split(","))
            return Constraint(match.group(1), op, values)
    raise ValueError(f"not a constraint: {text!r} (use K=V, K!=V or 'K in A,B')")


def all_match(constraints: Iterable[Constraint], labels: Mapping[str, str]) -> bool:
    return all(c.matches(labels) for c in constraints)
