"""`--export`, as in Slurm: which of the submitter's environment variables a job's tasks get.

The values are read where the job is submitted and stored with it (`JobSpec.export`); on the worker
they go over the worker's own environment and under the job's `env` and corral's `CORRAL_*`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from corral.client.errors import CorralError

NONE, ALL = "NONE", "ALL"
VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
OWN_PREFIX = "CORRAL_"  # corral's own variables: every task gets its own (a job token, never the submitter's)


class ExportError(CorralError):
    def __init__(self, message: str) -> None:
        super().__init__(None, message)


def exported(selection: str | Iterable[str] | Mapping[str, str] | None,
             environ: Mapping[str, str]) -> dict[str, str]:
    """The variables `selection` names, with their values in `environ`.

    `selection` is NONE (or None: nothing), ALL (every variable but corral's own and those no task could
    be given: a name that is no shell name, a value that is no text), names separated by commas or given as
    a list, or a mapping of names to values taken as they are.
    """
    if isinstance(selection, Mapping):
        return {str(name): str(value) for name, value in selection.items()}
    items = [selection] if selection is None or isinstance(selection, str) else list(selection)
    names = [name.strip() for item in items if item is not None for name in str(item).split(",") if name.strip()]
    if not names or names == [NONE]:
        return {}
    if NONE in names:
        others = ", ".join(name for name in names if name != NONE)
        raise ExportError(f"--export NONE exports nothing: it cannot be given with {others}")
    if ALL in names:
        return {name: value for name, value in environ.items()
                if VARIABLE_NAME.fullmatch(name) and not name.startswith(OWN_PREFIX) and _text(value)}
    chosen = {}
    for name in names:
        if "=" in name:
            raise ExportError(f"--export {name}: give names only; set a value with --env {name}")
        if not VARIABLE_NAME.fullmatch(name):
            raise ExportError(f"--export {name!r}: not an environment variable name")
        if name.startswith(OWN_PREFIX):
            raise ExportError(f"--export {name}: {OWN_PREFIX}* variables are corral's own; each task gets its own")
        if name not in environ:
            raise ExportError(f"--export {name}: not set in this environment")
        chosen[name] = environ[name]
    return chosen


def _text(value: str) -> bool:
    """False for bytes the environment held that are no UTF-8 text (read back as surrogates) and for NULs."""
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return "\0" not in value
