"""What the job spec reads from text (sizes, durations) and its plain constants, with no pydantic: `corral submit`
sends the spec as given and the controller validates it, so the command needs these without the models."""

from __future__ import annotations

import re

FILESYSTEM_ID = r"^[0-9a-f]{16,64}$"  # corral.filesystem's ids
MAX_BATCH = 1000  # jobs in one batch submission (each its own job, rows and history)
MAX_CUSTOM_AMOUNT = 1e9  # of one custom slot

_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
          "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}
_DURATION_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_bytes(value: object) -> object:
    """Accept 1073741824, "1G", "512Mi", "2.5g" (decimal k/M/G/T, binary Ki/Mi/Gi/Ti; a trailing B is optional)."""
    if not isinstance(value, str):
        return value
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kmgt]i?)?b?\s*", value.lower())
    if not match:
        raise ValueError(f"not a size: {value!r} (use bytes or a unit, e.g. 512M, 4Gi)")
    if not match.group(2) and "." in match.group(1):
        raise ValueError(f"not a whole number of bytes: {value!r} (give a unit for fractions, e.g. 1.5G)")
    return int(float(match.group(1)) * _UNITS[match.group(2) or ""])


def format_bytes(size: float, compact: bool = False) -> str:
    """What `parse_bytes` reads back: decimal units, as `--memory 4G` means 4*10**9. One decimal (1.0G), or compact
    (capacities, reasons): 16G, 17.2G."""
    value = float(size)
    unit = ""
    for unit in ("", "K", "M", "G", "T"):  # noqa: B007 - the unit reached is the one used
        if abs(value) < 1000 or unit == "T":
            break
        value /= 1000
    if not unit:
        return f"{int(size)}B"
    return f"{value:.3g}{unit}" if compact else f"{value:.1f}{unit}"


def parse_duration(value: object) -> object:
    """Accept seconds as a number, or "90s", "15m", "2h", "1d"."""
    if not isinstance(value, str):
        return value
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([smhd]?)\s*", value.lower())
    if not match:
        raise ValueError(f"not a duration: {value!r} (use seconds or a unit, e.g. 90s, 15m, 2h)")
    return float(match.group(1)) * _DURATION_UNITS[match.group(2)]


def parse_gpus(value: object) -> object:
    """Whole devices (kept as an integer), or a share of one device in hundredths: 0.25, not 0.333 or 1.5."""
    if isinstance(value, bool):
        raise ValueError("not a number of GPUs: a boolean (whole devices, or a share such as 0.25)")
    if not isinstance(value, int | float | str):
        return value
    try:
        amount = float(value)
    except ValueError:
        raise ValueError(f"not a number of GPUs: {value!r} (whole devices, or a share such as 0.25)") from None
    if amount.is_integer():
        return int(amount)
    if not 0 < amount < 1 or abs(amount * 100 - round(amount * 100)) > 1e-6:
        raise ValueError(f"{value!r} GPUs: ask for whole devices, or a share of one device from 0.01 to 0.99 "
                         "in hundredths (a share never spans two devices)")
    return round(amount, 2)
