"""float64_compute read under every scale a float64 computation may apply, owned by the
ledger: a float64 output is the float64 oracle's at the exact 1/sqrt(d_k), at that scale
rounded to float32, or at the split float32 scale (sqrt(scale) rounded to float32 and
applied to Q and to K: onnxruntime's CPU Attention kernel), each a reading of the scale,
so the arithmetic is float64 when one of them is within FLOAT64: the scale's rounding is
scale_precision's axis, not float64_compute's.  A system whose arithmetic is below float64
is far from all three (float32 arithmetic: ~1e-7).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from conformance.oracle.reference import attention

FLOAT64 = 1e-12  # max |output - float64 oracle| of a float64 computation


def scales(exact: float) -> dict[str, float]:
    """The scale a float64 computation of `exact` applies under each reading (the words of
    scale_precision): as is, rounded to float32, and split (its square root rounded to
    float32 and applied to Q and to K: float32(sqrt(float32(exact)))^2, exact at d = 1, 16
    for 1/sqrt(d)).  The same arithmetic as runners/_export/onnx_runtime.split_scale, which
    a runner may not import from here."""
    return {"float64": exact, "float32_rounded": float(np.float32(exact)),
            "split_float32": float(np.float32(np.sqrt(np.float32(exact)))) ** 2}


def split_scale(d: int) -> float:
    """The split reading of 1/sqrt(d) (scales)."""
    return scales(1 / np.sqrt(d))["split_float32"]


LABELS = {"float64": "exact scale", "float32_rounded": "float32 scale",
          "split_float32": "split float32 scale"}  # float64_compute's evidence


def float64_readings(case, out) -> dict[str, float]:
    """max |out - float64 oracle of `case`| at the exact scale of its d_k (or the scale it
    sets), that scale rounded to float32, and the split float32 scale."""
    a = case.attention
    exact = a.scale if a.scale is not None else 1 / np.sqrt(a.qk_head_dim)
    out = np.asarray(out, np.float64)
    return {LABELS[k]: float(np.max(np.abs(out - attention(replace(case, attention=replace(
        a, scale=s))).output))) for k, s in scales(exact).items()}


def float64_word(readings: dict[str, float]) -> str:
    return "float64" if min(readings.values()) <= FLOAT64 else "below_float64"


def quoted(readings: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.1e}" for k, v in readings.items())
