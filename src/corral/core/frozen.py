"""Frozen dataclasses made in bulk: the objects a scheduling pass makes per row or per task."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F")


def maker(cls: type[F]) -> Callable[..., F]:
    """A maker of instances of the frozen dataclass `cls` from its fields by position (every field, in order), each
    equal to the one the constructor makes, for a pass that makes one per task or job: a plain class's `__init__`
    stores the fields as attributes (an instance's own stores, some ten times cheaper than the frozen class's
    `object.__setattr__`) and then makes the instance one of `cls` (Python lets an instance change class where both
    keep their attributes alike: both in a `__dict__`, or both in the same slots). About half the cost of building a
    dictionary of the fields and setting it as the instance's; the class must have no `__post_init__`. The classes a
    pass makes in bulk keep their fields in slots: changing the class of an instance that keeps a `__dict__` makes that
    dictionary (its values were inline until then), which every read of a field then looks in."""
    if getattr(cls, "__post_init__", None) is not None:
        raise TypeError(f"{cls.__name__} has a __post_init__, which a maker would skip")
    names = [field.name for field in dataclasses.fields(cls)]  # type: ignore[arg-type]
    source = (f"def __init__(self, {', '.join(names)}):\n" + "".join(f"    self.{name} = {name}\n" for name in names)
              + "    self.__class__ = made_class\n")
    namespace: dict[str, Any] = {"made_class": cls}
    exec(source, namespace)  # as dataclasses writes its own __init__
    members = {"__init__": namespace["__init__"], "__module__": __name__}
    bases: tuple[type, ...] = ()
    if "__slots__" in vars(cls):  # its fields in slots: the plain class has the same, or Python refuses the change
        members["__slots__"] = cls.__slots__
        # And the same bases (Python changes the class only between classes adding the same slots to the same base),
        # which must keep no `__setattr__` of their own: the plain class's stores would go through it.
        bases = cls.__bases__
        if any(base.__setattr__ is not object.__setattr__ for base in bases):
            raise TypeError(f"{cls.__name__} has a base with a __setattr__ of its own: a maker's stores would call it")
    return type(f"Made{cls.__name__}", bases, members)
