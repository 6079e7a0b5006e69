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


def made_from(cls: type[F], fields: dict[str, Any]) -> F:
    """As `made`, from a dictionary the caller built: it becomes the instance's own. A pass that makes many instances
    alike (a job's units) copies one dictionary made once and sets the fields that differ, which costs about half of
    packing every field as a keyword again."""
    instance = object.__new__(cls)
    object.__setattr__(instance, "__dict__", fields)
    return instance
