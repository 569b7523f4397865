"""Resolution before naming: a probe names a reading only where its input tells that reading
from every other one.

The probe's resolution is how far the output is from its best reading (its own rounding, a
kernel's float32 arithmetic): another reading whose oracle output lies within
RESOLUTION_FACTOR times that distance of the best one's cannot be told from it by this
input (identical candidates never can).  Such a tie is never named by the nearest: the cell
names the reading the system's documentation states where that is one of the tied, else it
says `not_probed` and names every reading in the tie with its distance.  A probe that can
change its input to part them (masks.py: larger scores) does so first; one that cannot
(a causal-only window, where w keys and 2w - 1 keys are the same keys) says what it could
not tell.
"""
from __future__ import annotations

import numpy as np

from conformance.conventions.axes import NOT_PROBED, Convention

RESOLUTION_FACTOR = 2.0  # readings closer together than this x the best's distance tie


def _apart(a: np.ndarray, b: np.ndarray) -> float:
    """max |a - b| over the positions both define; 0 where they are NaN alike; inf where the
    shapes differ or one is NaN where the other is not (they part there)."""
    if a.shape != b.shape:
        return float("inf")
    finite = np.isfinite(a) & np.isfinite(b)
    alike_elsewhere = (np.isnan(a) & np.isnan(b)) | (a == b)
    if not (finite | alike_elsewhere).all():
        return float("inf")
    return float(np.max(np.abs(a[finite] - b[finite]), initial=0.0))


def alike(distance: dict[str, float], candidates: dict[str, np.ndarray]) -> list[str]:
    """The best reading (least `distance`) and every reading this input cannot tell from
    it: its candidate within RESOLUTION_FACTOR x the best's distance of the best's.  Only
    the best where the best is at no finite distance (nothing to resolve by)."""
    best = min(distance, key=distance.get)
    if not np.isfinite(distance[best]):
        return [best]
    ref = np.asarray(candidates[best], np.float64)
    limit = RESOLUTION_FACTOR * distance[best]
    return [best] + [w for w, c in candidates.items() if w != best
                     and _apart(ref, np.asarray(c, np.float64)) <= limit]


def tie_cell(axis: str, ties: list[str], distance: dict[str, float], what: str,
             **documented) -> Convention:
    """The cell of readings this input cannot tell apart: the one the system's
    documentation states where it is among them (named so in the evidence), else
    not_probed, each named."""
    figures = "; ".join(f"{k} {v:.1e}" for k, v in distance.items())
    text = (f"{what}: max |output - oracle| under each reading: {figures}; "
            f"{', '.join(ties)} alike at this input (their oracle outputs lie within "
            f"{RESOLUTION_FACTOR:g} x the output's distance to the nearest)")
    return named_tie(axis, ties, text, **documented)


def named_tie(axis: str, ties: list[str], text: str, **documented) -> Convention:
    """A tie whose `text` says why the readings are alike: the documented word where it is
    one of `ties`, else not_probed (a probe whose resolution is not the oracle's distance,
    e.g. what a CPU's choice of kernel moves, names its tie through here too)."""
    doc = documented.get("documented")
    if doc in ties:
        return Convention(axis, doc, f"{text}: named by the system's documentation, "
                          f"{documented.get('documented_source', '')}", **documented)
    return Convention(axis, NOT_PROBED, f"{text}: the probe cannot tell them apart",
                      **documented)
