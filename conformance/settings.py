"""Environment values and numeric options, parsed in one place with named errors.

A value is read once where the session starts (plugin configure, a CLI command),
checked against its bounds, and refused with a SettingError that names the
variable or option, the value (bounded) and what would be valid, never a raw
traceback or a crash later in setitimer.  Numbers read as a person writes them:
`300`, `2.5`, `1e12`, `10^12`, `10**12`, `1_000_000`.
"""
from __future__ import annotations

import math
import os
import re
from typing import Mapping

_POWER = re.compile(r"\s*(\d+)\s*(?:\^|\*\*)\s*(\d+)\s*")
MAX_TIMEOUT = 7 * 24 * 3600.0  # a week: setitimer and the workers take any finite value


class SettingError(ValueError):
    """A setting that cannot be used; the message names it and the fix."""


def _shown(text: str) -> str:
    text = re.sub(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", "?", text)
    return repr(text if len(text) <= 40 else text[:37] + "...")


def parse_number(name: str, text: str) -> float:
    """`text` as a finite number, or a SettingError naming `name`."""
    raw = text.strip().replace("_", "")
    power = _POWER.fullmatch(raw)
    try:
        value = float(int(power[1]) ** int(power[2])) if power and len(raw) < 12 \
            else float(raw)
    except (ValueError, OverflowError):
        raise SettingError(f"{name}={_shown(text)}: not a number") from None
    if not math.isfinite(value):
        raise SettingError(f"{name}={_shown(text)}: must be a finite number")
    return value


def positive_number(environ: Mapping[str, str] | None, name: str, default: float,
                    unit: str, *, allow_zero: bool = False, maximum: float | None = None,
                    integer: bool = False) -> float:
    """The variable `name` of `environ` (default os.environ) as a number > 0 (>= 0 with
    `allow_zero`), at most `maximum`; `default` when unset or empty."""
    text = (os.environ if environ is None else environ).get(name, "")
    if not text.strip():
        return default
    return checked(name, parse_number(name, text), unit, allow_zero=allow_zero,
                   maximum=maximum, integer=integer)


def checked(name: str, value: float, unit: str, *, allow_zero: bool = False,
            maximum: float | None = None, integer: bool = False) -> float:
    """`value` within its bounds, or a SettingError naming `name`."""
    if not math.isfinite(value):
        raise SettingError(f"{name}={value}: must be a finite number of {unit}")
    low = "0 (0 = none)" if allow_zero else "a positive number"
    if value < 0 or (value == 0 and not allow_zero):
        raise SettingError(f"{name}={value:g}: must be {low} of {unit}")
    if maximum is not None and value > maximum:
        raise SettingError(f"{name}={value:g}: at most {maximum:g} {unit}")
    if integer and not value.is_integer():
        raise SettingError(f"{name}={value:g}: must be a whole number of {unit}")
    return value


FIGURES_ENV = "CONFORMANCE_FIGURES"


def figures_wanted(environ: Mapping[str, str] | None = None) -> bool:
    """CONFORMANCE_FIGURES: the reports draw their PNG figures unless it says 0 / false /
    no / off (drawing them costs a matplotlib import, about 1.5 s of CPU, in every run
    that writes reports: the suite's own tests turn it off in their pytest subprocesses)."""
    raw = (os.environ if environ is None else environ).get(FIGURES_ENV, "").strip().lower()
    if raw in ("", "1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise SettingError(f"{FIGURES_ENV}={_shown(raw)}: expected 1 or 0 (on / off)")


def item_timeout(option: float | None, environ=None) -> float:
    """--item-timeout, else CONFORMANCE_ITEM_TIMEOUT, else 300 s; 0 = no limit."""
    if option is not None:
        return checked("--item-timeout", float(option), "seconds", allow_zero=True,
                       maximum=MAX_TIMEOUT)
    return positive_number(environ, "CONFORMANCE_ITEM_TIMEOUT", 300.0, "seconds",
                           allow_zero=True, maximum=MAX_TIMEOUT)


def extra_runners(environ=None) -> list[tuple[str, str]]:
    """CONFORMANCE_EXTRA_RUNNERS: comma-separated `module:Class` entries."""
    text = (os.environ if environ is None else environ).get("CONFORMANCE_EXTRA_RUNNERS", "")
    out = []
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        module, sep, cls = entry.partition(":")
        if not sep or not module.strip() or not cls.strip() or ":" in cls:
            raise SettingError(f"CONFORMANCE_EXTRA_RUNNERS: entry {_shown(entry)} must be "
                               "module:Class (e.g. mypkg.runners:MyRunner), comma-separated")
        out.append((module.strip(), cls.strip()))
    return out
