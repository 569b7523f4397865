"""Reading the real-valued fields of a case: tolerances and the softmax scale.

Split from loader.py (which validates everything else) to keep each module
short; the reader `r` is loader._Reader (its `fail` builds the CaseError that
names file, case and field).
"""
from __future__ import annotations

import math
from typing import Any, Mapping

from conformance.case.model import short


def as_float(value: Any) -> float:
    """`value` as a float, NaN when it is not a number (booleans are not numbers).
    YAML 1.1 reads `1e-15` (no dot) as a string: accepted."""
    try:
        return math.nan if isinstance(value, bool) else float(value)
    except (TypeError, ValueError, OverflowError):
        return math.nan


def number(r, value: Any, dotted: str) -> float:
    """A finite number >= 0."""
    x = as_float(value)
    if not (math.isfinite(x) and x >= 0):
        raise r.fail(dotted, f"must be a finite number >= 0, got {short(value)}")
    return x


def scale(r, sec: Mapping[str, Any]) -> float | None:
    """attention.scale: absent or null = the default 1/sqrt(qk_head_dim); else a
    finite number > 0 that multiplies the scores before the softmax."""
    value = sec.get("scale")
    if value is None:
        return None
    x = as_float(value)
    if not (math.isfinite(x) and x > 0):
        raise r.fail("attention.scale", "must be a finite number > 0 (it multiplies q.k "
                     "before the softmax; leave it out for 1/sqrt(qk_head_dim)), got "
                     f"{short(value)}")
    return x
