"""Size caps on what users and workers send: far above real use, low enough that no spec can hurt the cluster.

A spec is read back with every job listing, stored in every attempt's order and kept in the
store for as long as the job is; these caps keep each of those cheap. The HTTP edge refuses a
body over `MAX_REQUEST_BODY` before parsing it (413); the checks here refuse a field past its
cap (422) with a message naming the field and the cap.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pydantic import ValidationInfo

from corral.core.wire import incoming

KiB = 2**10
MiB = 2**20

MAX_REQUEST_BODY = 4 * MiB  # any JSON request, before parsing (uploads have their own limits)
MAX_SPEC = 3 * MiB  # a whole job or deployment spec, as stored (JSON)

MAX_ARGS = 4096
MAX_ARG = 128 * KiB
MAX_COMMAND = 1 * MiB

MAX_ENV_VARS = 1024
MAX_ENV_NAME = 256
MAX_ENV_VALUE = 128 * KiB
MAX_ENV = 1 * MiB

MAX_LABELS = 64
MAX_LABEL_KEY = 63
MAX_LABEL_VALUE = 256

MAX_CONSTRAINTS = 64
MAX_CONSTRAINT = 1024
MAX_DEPENDENCIES = 1000  # ids in `after`, and in `after_any`
MAX_CUSTOM_RESOURCES = 64
MAX_RESOURCE_NAME = 63
MAX_MODEL_NAMES = 64
MAX_MODEL_NAME = 200
MAX_PATH = 4096  # a file system path (PATH_MAX)
MAX_ADDRESS = 255  # a worker's address: a host name or an IP


def _size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _show(size: int) -> str:
    if size >= MiB and size % MiB == 0:
        return f"{size // MiB} MiB"
    if size >= KiB and size % KiB == 0:
        return f"{size // KiB} KiB"
    return f"{size} bytes"


def check_command(command: list[str]) -> list[str]:
    if len(command) > MAX_ARGS:
        raise ValueError(f"command has {len(command)} arguments; at most {MAX_ARGS}")
    total = 0
    for position, arg in enumerate(command):
        size = _size(arg)
        if size > MAX_ARG:
            raise ValueError(f"command argument {position} is {size} bytes; at most {_show(MAX_ARG)}")
        total += size
    if total > MAX_COMMAND:
        raise ValueError(f"command is {total} bytes in all; at most {_show(MAX_COMMAND)}")
    return command


def check_env(env: dict[str, str]) -> dict[str, str]:
    if len(env) > MAX_ENV_VARS:
        raise ValueError(f"env has {len(env)} variables; at most {MAX_ENV_VARS}")
    total = 0
    for name, value in env.items():
        if _size(name) > MAX_ENV_NAME:
            raise ValueError(f"env name {name[:40]!r}... is over {MAX_ENV_NAME} bytes")
        size = _size(value)
        if size > MAX_ENV_VALUE:
            raise ValueError(f"env {name} is {size} bytes; at most {_show(MAX_ENV_VALUE)}")
        total += _size(name) + size
    if total > MAX_ENV:
        raise ValueError(f"env is {total} bytes in all; at most {_show(MAX_ENV)}")
    return env


def check_labels(labels: dict[str, str]) -> dict[str, str]:
    if len(labels) > MAX_LABELS:
        raise ValueError(f"{len(labels)} labels; at most {MAX_LABELS}")
    for key, value in labels.items():
        if len(key) > MAX_LABEL_KEY:
            raise ValueError(f"label key {key[:40]!r}... is over {MAX_LABEL_KEY} characters")
        if len(value) > MAX_LABEL_VALUE:
            raise ValueError(f"label {key} has a value of {len(value)} characters; at most {MAX_LABEL_VALUE}")
    return labels


def check_count(what: str, items: Iterable | Mapping, most: int, longest: int | None = None) -> None:
    """At most `most` items, each string among them (a mapping's keys) at most `longest` characters."""
    items = list(items)
    if len(items) > most:
        raise ValueError(f"{len(items)} {what}; at most {most}")
    if longest is not None:
        for item in items:
            if isinstance(item, str) and len(item) > longest:
                raise ValueError(f"one of the {what} is {len(item)} characters; at most {longest}")


def capped(check: Callable[[Any], object]) -> Callable[[type, Any, ValidationInfo], Any]:
    """`check` as a field validator: it judges what comes in, and lets a spec read back from the store pass."""

    def validator(cls: type, value: Any, info: ValidationInfo) -> Any:
        if incoming(info):
            check(value)
        return value

    return validator


def check_spec_size(size: int) -> None:
    """`size`: the spec as JSON, in bytes."""
    if size > MAX_SPEC:
        raise ValueError(f"the spec is {size} bytes in all; at most {_show(MAX_SPEC)}")
