"""Frozen dataclasses made in bulk: the objects a scheduling pass makes per row or per task."""

from __future__ import annotations

from typing import Any, TypeVar

F = TypeVar("F")


def made(cls: type[F], **fields: Any) -> F:
    """An instance of a frozen dataclass equal to the one its constructor makes, made without the constructor's
    field-by-field assignment (`object.__setattr__` for each field, which costs three to five times this): every field
    must be given, and the class must have no `__post_init__`. The keywords' own dictionary becomes the instance's,
    not copied into a new one."""
    instance = object.__new__(cls)
    object.__setattr__(instance, "__dict__", fields)
    return instance
