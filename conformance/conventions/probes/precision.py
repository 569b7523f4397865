"""scale_precision, owned by the ledger: which scale a float64 call applies, read from
everything the call returns, the output and the attention weights it returns beside it.

A float64 probe case (d_k 3: 1/sqrt(3) is no float32 number, and neither is its float32
square root squared) is asked in the first form the runner takes (needs.py: as written,
then with what the system applies on every call, then at its probe_head_size; through its
translate and run), and each returned array is read against the float64 oracle (the
output; the weights per head, or averaged over heads, as the system returns them) under
three scales:
- `float64`: the exact 1/sqrt(d_k);
- `float32_rounded`: that scale rounded to float32;
- `split_float32`: sqrt(scale) rounded to float32 and applied to Q and to K (onnxruntime's
  CPU Attention kernel; float64.scales).
A reading holds where it is within FLOAT64 (1e-12).  Where the output and the weights read
differently (a system whose need_weights=True graph rounds the scale and whose
need_weights=False graph does not, e.g. the opset-18 torch export) the cell is `depends`,
each condition with its value and distances: nothing measured is dropped.  Where no reading
holds for any of them the arithmetic is below float64, so the scale's rounding is not
separable: `not_probed` with the figures (see float64_compute).  A system that applies no
scale (its probe_needs set scale 1.0: T5) has no rounding to read: `not_applicable` where
its float64 output is the oracle's at 1.0.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from conformance.conventions.axes import DEPENDS, NA, NOT_PROBED, Convention
from conformance.conventions.probes.probing import distances
from conformance.conventions.probes.asked import documented, said, unmeasured
from conformance.conventions.probes.float64 import FLOAT64, scales
from conformance.conventions.probes.forms import first_taken
from conformance.conventions.probes.needs import needed_forms
from conformance.oracle.reference import attention

AXIS = "scale_precision"
HEAD3 = {"qk_head_dim": 3, "v_head_dim": 3}  # 1/sqrt(3): rounds in float32, and so does the split


def readings(case, output, weights=None, returned: str = "none") -> dict[str, dict]:
    """part ("output", "weights") -> reading -> max |part - the float64 oracle's| at that
    reading's scale; the weights against the oracle's per-head weights, or their mean over
    heads where `returned` is "averaged"."""
    oracle = {w: attention(replace(case, attention=replace(case.attention, scale=s)))
              for w, s in scales(1 / np.sqrt(case.attention.qk_head_dim)).items()}
    parts = {"output": distances(output, {w: e.output for w, e in oracle.items()})}
    if weights is not None and returned in ("per_head", "averaged"):
        parts["weights"] = distances(weights, {
            w: e.weights.mean(1) if returned == "averaged" else e.weights
            for w, e in oracle.items()})
    return parts


def part_word(d: dict[str, float]) -> str | None:
    """The one reading within FLOAT64 of one part, else None: where several are, this
    input cannot tell them apart (resolution.py), so none is named, never the nearest."""
    within = [w for w in d if d[w] <= FLOAT64]
    return within[0] if len(within) == 1 else None


def _unnamed(d: dict[str, float]) -> str:
    """Why a part names no reading: none within FLOAT64, or several alike."""
    within = [w for w in d if d[w] <= FLOAT64]
    return f"{', '.join(within)} alike (no input here parts them)" if within else \
        "no reading within"


def figures(d: dict[str, float]) -> str:
    return "; ".join(f"{k} {v:.1e}" for k, v in d.items())


def judged(parts: dict[str, dict], returned: str, what: str, **doc) -> Convention:
    """The cell of the measured parts (readings()): one word where every part that holds a
    reading holds the same, `depends` where they differ, `not_probed` where none holds."""
    names = {"output": "output", "weights": f"returned weights ({returned})"}
    words = {p: part_word(d) for p, d in parts.items()}
    text = " | ".join(f"{names[p]}: {words[p] or _unnamed(d)}: max |{p} - float64 "
                      f"oracle's| under each reading: {figures(d)}" for p, d in parts.items())
    held = {w for w in words.values() if w}
    if not held and any(sum(v <= FLOAT64 for v in d.values()) > 1 for d in parts.values()):
        return Convention(AXIS, NOT_PROBED, f"{what}: {text}; readings alike within "
                          f"{FLOAT64:g}: this input cannot tell the scale's rounding")
    if not held:
        return Convention(AXIS, NOT_PROBED, f"{what}: {text}; none within {FLOAT64:g}: the "
                          "arithmetic is below float64, so the scale's rounding is not "
                          "separable (see float64_compute)")
    unheld = [names[p] for p, w in words.items() if not w]
    tail = f"; {', '.join(unheld)}: no reading within {FLOAT64:g}, so there the scale's " \
        "rounding is not separable" if unheld else ""
    return Convention(AXIS, held.pop() if len(held) == 1 else DEPENDS,
                      f"{what}: {text}{tail}", **doc)


def unscaled(runner, case, got, what: str) -> Convention:
    """The cell of a system that scales by nothing (T5: scaling 1.0, its probe_needs):
    not_applicable where the float64 output is the float64 oracle's at scale 1.0 within
    FLOAT64 (1.0 is exact in any precision, so there is no rounding to read), else the
    readings under that one scale."""
    d = distances(got.output, {"1.0": attention(case).output})["1.0"]
    head = f"{runner.name}, {said(what, got)}: the scores are not scaled (scale 1.0, exact " \
        f"in any precision): max |output - float64 oracle at scale 1.0| {d:.1e}"
    if d <= FLOAT64:
        return Convention(AXIS, NA, head, **documented(runner, AXIS))
    return Convention(AXIS, NOT_PROBED, f"{head}, above {FLOAT64:g}: the arithmetic is below "
                      "float64 (see float64_compute)")


def scale_precision_cell(runner, own: Convention | None = None) -> Convention:
    """A float64 call of the probe case in the first form the runner takes, its output and
    the weights it returns read under the three scales (judged)."""
    case, got, note = first_taken(runner, needed_forms(runner, "scale-precision",
                                                       attention=HEAD3,
                                                       inputs={"dtype": "float64"}))
    d = case.attention.qk_head_dim
    what = f"probe_case {case.id}, float64 arrays, d_k {d}{note}"
    if not got.answered:
        return unmeasured(AXIS, runner, what, got)
    if case.attention.scale == 1.0:  # a system that applies no scale (its probe_needs)
        return unscaled(runner, case, got, what)
    parts = readings(case, got.output, got.attention_weights, got.weights_returned)
    return judged(parts, got.weights_returned, f"{runner.name}, {said(what, got)}",
                  **documented(runner, AXIS))
