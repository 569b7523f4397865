"""The canonical weights as an artifact stores them.

A converted program may store its weights in a narrower type than it computes in: LiteRT's
float16 weight conversion (`supported_types=[tf.float16]`) keeps every weight as float16
and DEQUANTIZEs it to float32 at load.  Its outputs then move by the weights' rounding
(about 5e-4 on a probe model), which says nothing about how it masks or normalises.  The
judges compare such a program with the oracle run on the weights it holds (each weight
rounded through the stored type, then computed in float64), so the rounding is ruled out
and what is left is the program's own arithmetic.
"""
from __future__ import annotations

from dataclasses import replace

from conformance.oracle.canonical import CaseData, round_to_dtype

# the element types a program may store its weights in that round the float32 canonical
# weights (float32 and float64 hold them exactly)
ROUNDING = ("float16", "bfloat16")


def rounds(weights_dtype: str) -> bool:
    """Whether weights stored as `weights_dtype` differ from the canonical ones."""
    return weights_dtype in ROUNDING


def as_stored(data: CaseData, weights_dtype: str) -> CaseData:
    """`data` with every weight array rounded through `weights_dtype` (back to float64);
    the inputs as they are.  Unchanged where the type holds the weights exactly."""
    if not rounds(weights_dtype):
        return data
    w = data.weights
    rounded = {n: round_to_dtype(a, weights_dtype) for n, a in w.arrays().items()}
    return replace(data, weights=replace(w, **rounded))
