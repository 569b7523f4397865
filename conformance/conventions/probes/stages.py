"""Which stage of the scores a system returns beside its output, read by the ledger where a
runner's probe call returns them (Observation.extras["score_stages"]: mode -> (B, H, T, S)
array; the ONNX Attention op's qk_matmul_output at qk_matmul_output_mode 0, 1, 2): each
array is named by the NumPy reading it is nearest, the scaled scores (`qk`), the
softcapped ones, their softmax, or the softmax without the cap, every distance quoted.
The spec's text for mode 0 is "the output of qk matmul" (before the softcap): the
evidence says whether mode 0 follows it.  capped.py quotes this in the softcap cell's
evidence (the probe case: softcap 1, no mask, so "after the mask" is the softcapped
scores).
"""
from __future__ import annotations

import numpy as np

from conformance.conventions.probes.probing import distances
from conformance.oracle.positional import softcap
from conformance.oracle.reference import scaled_scores

SPEC0 = "mode 0 = 'the output of qk matmul', before softcap"


def candidates(case) -> dict[str, np.ndarray]:
    """(B, H, T, S) readings of the case's scores, in float64 (the oracle's scaled scores,
    reference.scaled_scores)."""
    s = scaled_scores(case)[0]
    cap = case.attention.softcap
    capped = s if cap is None else softcap(s, cap)

    def softmax(z):
        e = np.exp(z - z.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    return {"qk": s, "softcapped": capped, "softmax": softmax(capped),
            "softmax(no softcap)": softmax(s)}


def stage_words(case, stages: dict) -> dict[int, tuple[str, dict[str, float]]]:
    """mode -> (the nearest reading, every distance)."""
    cands = candidates(case)
    out = {}
    for mode, arr in sorted(stages.items()):
        d = distances(np.asarray(arr, np.float64), cands)
        out[int(mode)] = (min(d, key=d.get), d)
    return out


def stages_text(case, stages: dict) -> str:
    """The evidence: each mode's reading with its distances, and mode 0 against the spec."""
    words = stage_words(case, stages)
    texts = [f"mode {m}: {w} (" + ", ".join(f"{k} {v:.1e}" for k, v in d.items()) + ")"
             for m, (w, d) in words.items()]
    zero = words.get(0, ("", {}))[0]
    spec = (f"follows the spec text ({SPEC0})" if zero == "qk" else
            f"departs from the spec text ({SPEC0}): it returns {zero}")
    return f"qk_matmul_output beside it: mode 0 {spec}; " + "; ".join(texts)
