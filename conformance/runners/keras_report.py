"""The cross-backend report section of the Keras runners.

Rows hold figures, not arrays, so each Keras row carries a compact digest of
its output in `extras["_output_digest"]` (keras_mha.digest): the values, whole
up to 512 elements, else 256 evenly spaced ones (the table then says
"sampled", and its figure is a lower bound).  Differences are rounded to 3
significant digits like every other figure, so the report stays byte-identical
across runs.  No framework is imported here.
"""
from __future__ import annotations

import numpy as np

# (column title, runner a, runner b): max |a - b| over the outputs of a case.
PAIRS = (
    ("tf − jax", "keras.tensorflow", "keras.jax"),
    ("tf − torch", "keras.tensorflow", "keras.torch"),
    ("scores: tf − jax", "keras.tensorflow.scores", "keras.jax.scores"),
    ("scores: tf − torch", "keras.tensorflow.scores", "keras.torch.scores"),
    ("tf: fused − scores path", "keras.tensorflow", "keras.tensorflow.scores"),
    ("gqa: tf − jax", "keras.gqa.tensorflow", "keras.gqa.jax"),
    ("gqa: tf − torch", "keras.gqa.tensorflow", "keras.gqa.torch"),
    ("tf: gqa − mha", "keras.gqa.tensorflow", "keras.tensorflow"),
)


def max_difference(a: dict | None, b: dict | None) -> str:
    """One cell: max |a - b| over elements both give as numbers, 3 significant digits."""
    if not a or not b or a.get("size") != b.get("size"):
        return ""
    x = np.array([np.nan if v is None else v for v in a["values"]], dtype=np.float64)
    y = np.array([np.nan if v is None else v for v in b["values"]], dtype=np.float64)
    both = np.isfinite(x) & np.isfinite(y)
    if not both.any():
        return "n/a"
    d = float(np.max(np.abs(x[both] - y[both])))
    text = "0" if d == 0 else f"{d:.2e}"
    if a.get("sampled"):
        text += f" (sampled {len(x)} of {a['size']})"
    if (~both).any():
        text += f" ({int((~both).sum())} non-finite skipped)"
    return text


def section_keras_backends(frame, cases, runners):
    """Cases x backend pairs: how far apart Keras backends are on the same case."""
    import pandas as pd

    from ..report import Section

    digests = {}
    for r in frame.itertuples(index=False):
        extras = r.extras if isinstance(r.extras, dict) else {}
        if "_output_digest" in extras:
            digests[(r.case, r.runner)] = extras["_output_digest"]
    if not digests:
        return None
    present = {name for _, name in digests}
    pairs = [(t, a, b) for t, a, b in PAIRS if a in present and b in present]
    if not pairs:
        return None
    ids = [c.id for c in cases if any((c.id, n) in digests for n in present)]
    table = pd.DataFrame({t: [max_difference(digests.get((cid, a)), digests.get((cid, b)))
                              for cid in ids] for t, a, b in pairs},
                         index=pd.Index(ids, name="case"))
    return Section("Keras: differences between backends",
                   "Max |a − b| between the outputs of two Keras rows on the same case "
                   "(float32-rounded digests unless the case is float64; empty = one side "
                   "did not run). fused = return_attention_scores=False "
                   "(ops.dot_product_attention), scores = return_attention_scores=True.",
                   table)
