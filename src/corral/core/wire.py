"""What any value from outside must be, whatever field it comes in: the hygiene every request model shares.

Numbers are finite (JSON bodies may carry NaN and Infinity literals, which no field means), strings hold no
NUL (PostgreSQL refuses it in text, processes in argv and environments) and no lone surrogate (it cannot be
encoded to store or answer), and ids fit the store's id columns (Integer: int32 on PostgreSQL).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo, model_validator

MAX_ID = 2**31 - 1
MAX_COUNT = 2**31 - 1  # attempts, epochs, exit codes and ports share the ids' Integer columns
# The validation context of a spec read back from the store: it was judged when it came in, and a rule added
# since (a size cap, a character refused) must not make a stored job unreadable, nor every listing with it.
STORED = {"stored": True}


# The validation context of a body whose JSON text `clean_json` found to hold no string that `clean_text` refuses:
# its strings are not walked again (the walk was half of a heartbeat's parse and validation on the controller).
CLEAN_JSON = {"clean_json": True}


def incoming(info: ValidationInfo) -> bool:
    """Whether this validation judges what comes in from outside, rather than reading back what is stored."""
    return not (info.context or {}).get("stored")


def clean_json(body: bytes) -> bool:
    """Whether no string parsed from the JSON `body` by `json.loads` can hold a NUL or a lone surrogate, told from its
    bytes alone (False says only that the strings must be walked). Such a string comes only from a `\\u` escape
    (`json.loads` refuses a raw control character in a string) or from a surrogate's own UTF-8 bytes, which begin
    with 0xED (`json.loads` decodes bytes with surrogatepass); a body with no NUL byte is not UTF-16 or UTF-32, the
    other encodings `json.loads` would read it in, so those two byte strings are where they would show."""
    return b"\x00" not in body and b"\\u" not in body and b"\xed" not in body


def clean_text(text: str) -> str:
    """`text` unchanged, or a ValueError saying why it cannot be stored or passed to a process."""
    if fault := _fault(text):
        raise ValueError(fault)
    return text


def _fault(text: str) -> str | None:
    """Why `text` cannot be stored or passed to a process; None when it can (ASCII always encodes)."""
    if "\x00" in text:
        return "must not contain a NUL character"
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "must be valid Unicode (a lone surrogate such as \\ud800 is not)"
    return None


def storable(text: str) -> str:
    """`text` with what cannot be stored spelled out: NUL as \\x00, a lone surrogate as \\udXXX."""
    return text.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")


def parse_id(text: str) -> int | None:
    """The id `text` spells in ASCII digits, or None where it names none the store can hold."""
    if not (text.isascii() and text.isdigit()):
        return None
    value = int(text)
    return value if value <= MAX_ID else None


Text = Annotated[str, AfterValidator(clean_text)]
Id = Annotated[int, Field(ge=1, le=MAX_ID)]
Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]


def _check_strings(value: Any, where: str) -> None:
    """Every string in `value` (keys too, at any depth) passes `clean_text`; the error names where it sits. The
    positions are named only once some string fails: making one for each string of a heartbeat's reports was
    most of the heartbeat's validation."""
    if not _all_clean(value):
        _name_the_fault(value, where)


# What may hold a string; a number, a bool or None is not walked into (a call for each cost a list of numbers,
# such as the attempts a heartbeat holds, more than the rest of its validation).
_MAY_HOLD_STRINGS = (str, dict, list, tuple)


def _all_clean(value: Any) -> bool:
    """Whether every string in `value` (keys too, at any depth) passes `clean_text`."""
    if isinstance(value, str):
        return _fault(value) is None
    if isinstance(value, dict):
        for key, item in value.items():
            if not (_all_clean(key) and (not isinstance(item, _MAY_HOLD_STRINGS) or _all_clean(item))):
                return False
    elif isinstance(value, list | tuple):
        for item in value:
            if isinstance(item, _MAY_HOLD_STRINGS) and not _all_clean(item):
                return False
    return True


def _name_the_fault(value: Any, where: str) -> None:
    """The ValueError of the first string in `value` that fails `clean_text`, naming where it sits."""
    if isinstance(value, str):
        try:
            clean_text(value)
        except ValueError as error:
            raise ValueError(f"{where or 'value'} {error}") from None
    elif isinstance(value, dict):
        for key, item in value.items():
            _name_the_fault(key, f"{where}: a key" if where else "a key")
            _name_the_fault(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _name_the_fault(item, f"{where}[{index}]")


class DeferredModel(BaseModel):
    """Base of the models corral writes (replies, orders) rather than reads from a request: pydantic builds a
    model's validator on its first use, not at import, so a command builds only the models it uses."""

    model_config = ConfigDict(defer_build=True)


class WireModel(BaseModel):
    """Base of every model read from a request: no NaN or infinity in a number, no NUL or lone surrogate
    in a string, checked on the raw input so that no field can forget it. Built at import, unlike DeferredModel:
    a route's `Body(alias=...)` over a deferred model makes pydantic warn when the route's adapter is built."""

    model_config = ConfigDict(allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _clean_strings(cls, data: Any, info: ValidationInfo) -> Any:
        if incoming(info) and not (info.context or {}).get("clean_json"):
            _check_strings(data, "")
        return data
