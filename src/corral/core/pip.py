"""A job's Python packages (`pip`) and interpreter (`python`): what each item is, and which are refused.

An item is one of three things, told apart without touching any file:
- a requirements file: `-r PATH` (or `--requirement PATH`), or a path ending in `.txt`;
- a path to a wheel or a project: anything else with a `/` in it, starting with `.`, or naming an archive
  (`x-1.0-py3-none-any.whl`, `x-1.0.tar.gz`);
- a requirement (PEP 508): `numpy==2.1.*`, `torch>=2`, `pkg @ https://...`.
Paths are relative to the job's working directory and must stay inside it, since that directory is
all a worker has of the submitter's files. Where packages come from (indexes, proxies) is the worker's
own configuration: an item cannot carry pip options of its own.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from enum import StrEnum

MAX_PIP_ITEMS = 256
MAX_PIP_ITEM = 1024  # characters of one item
# Every CPython 3 a worker could run now or in the next years; anything else is a typo or a Python 2 script.
OLDEST_MINOR, NEWEST_MINOR = 8, 19
_VERSION = re.compile(r"([0-9]{1,2})\.([0-9]{1,3})(?:\.([0-9]{1,3}))?")
ARCHIVES = (".whl", ".tar.gz", ".zip")  # what pip installs from a file
_REQUIREMENTS_OPTION = re.compile(r"(?:-r|--requirement)(?:\s+|=)(.+)")


class ItemKind(StrEnum):
    REQUIREMENT = "requirement"
    REQUIREMENTS_FILE = "requirements file"
    PATH = "path"  # a wheel or a project directory


@dataclass(frozen=True)
class PipItem:
    kind: ItemKind
    text: str  # a requirement as written, or the relative path


def classify(item: str) -> PipItem:
    """What `item` is; a ValueError, naming the item, says why it is refused."""
    text = item.strip()
    if not text:
        raise ValueError("a pip item is empty")
    if len(text) > MAX_PIP_ITEM:
        raise ValueError(f"pip item {text[:40]!r}... is {len(text)} characters; at most {MAX_PIP_ITEM}")
    if any(c in text for c in "\0\n\r"):
        raise ValueError(f"pip item {text[:80]!r} holds a NUL or a line break")
    option = _REQUIREMENTS_OPTION.fullmatch(text)
    if option:
        return PipItem(ItemKind.REQUIREMENTS_FILE, _inside_workdir(option.group(1).strip(), item))
    if text.startswith("-"):
        raise ValueError(f"pip item {text!r}: options other than -r are not taken (indexes and the like come "
                         "from the worker's own pip/uv configuration)")
    if " @ " in text or ("@" in text.split("/", 1)[0] and "://" in text):
        if "file:" in text.split("@", 1)[1]:
            raise ValueError(f"pip item {text!r}: a file URL reaches outside the working directory; "
                             "give the path relative to it instead")
        return PipItem(ItemKind.REQUIREMENT, _requirement(text))
    if text.endswith(".txt"):
        return PipItem(ItemKind.REQUIREMENTS_FILE, _inside_workdir(text, item))
    if "/" in text or text.startswith((".", "~")) or text.endswith(ARCHIVES):
        return PipItem(ItemKind.PATH, _inside_workdir(text, item))
    return PipItem(ItemKind.REQUIREMENT, _requirement(text))


def check_items(items: list[str]) -> list[str]:
    """The items as given, stripped, once each is known to be valid (field validator of JobSpec.pip)."""
    if len(items) > MAX_PIP_ITEMS:
        raise ValueError(f"{len(items)} pip items; at most {MAX_PIP_ITEMS}")
    for item in items:
        classify(item)
    return [item.strip() for item in items]


def _requirement(text: str) -> str:
    # Imported here: only a spec naming a requirement needs the parser (a command that lists jobs never does).
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        Requirement(text)
    except InvalidRequirement as error:
        raise ValueError(f"pip item {text!r} is not a requirement (PEP 508), a requirements file or a path "
                         f"inside the working directory: {error}") from None
    return text


def _inside_workdir(path: str, item: str) -> str:
    if path.startswith(("/", "~")):
        raise ValueError(f"pip item {item.strip()!r}: the path must be relative to the working directory")
    normal = posixpath.normpath(path)
    if normal == ".." or normal.startswith("../"):
        raise ValueError(f"pip item {item.strip()!r}: the path leaves the working directory")
    return path


def check_python(version: str) -> str:
    """`3.N` or `3.N.M` of a CPython some worker could have (3.8 to 3.19); a ValueError names the version."""
    match = _VERSION.fullmatch(version.strip())
    if not match:
        raise ValueError(f"python {version!r} is not a version: use 3.N or 3.N.M, e.g. 3.11")
    major, minor = int(match.group(1)), int(match.group(2))
    if major != 3 or not OLDEST_MINOR <= minor <= NEWEST_MINOR:
        raise ValueError(f"python {version} is a version no worker can run: corral builds environments with "
                         f"Python 3.{OLDEST_MINOR} to 3.{NEWEST_MINOR}")
    return version.strip()


def python_matches(wanted: str, available: str) -> bool:
    """`3.11` is matched by any 3.11.x; `3.11.4` only by itself."""
    wanted_parts, available_parts = wanted.split("."), available.split(".")
    return available_parts[:len(wanted_parts)] == wanted_parts
