"""Keras `MultiHeadAttention` on the backend of KERAS_BACKEND (default call and scores path).

Classified against the layer's own outputs (so the projections need no reimplementing):
a query row of zeros gives equal scores, so the layer's output there is the uniform row
(biases start at zero); boolean masks give the `added` / `cast_to_bool` references.
"""
from __future__ import annotations

import numpy as np
from common import (causal_kind, causal_masks, float_kind, float_mask, inputs, match,
                    polarity_kind, row_kind)

PACKAGES = ("keras", "jax", "jaxlib", "tensorflow-cpu", "torch", "numpy")
IMPORTS = ("keras",)


def _layer():
    import keras
    layer = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4)
    q, kv = inputs()
    layer(q, kv)  # build
    return layer, q, kv


def _call(layer, q, kv, mask=None, scores=False, **kw):
    import keras
    if mask is not None:
        mask = np.broadcast_to(mask, (q.shape[0], q.shape[1], kv.shape[1]))
    out = layer(q, kv, attention_mask=mask, return_attention_scores=scores, **kw)
    if scores:
        return keras.ops.convert_to_numpy(out[0]), keras.ops.convert_to_numpy(out[1])
    return keras.ops.convert_to_numpy(out)


def _fully_masked(scores):
    def probe():
        layer, q, kv = _layer()
        mask = np.ones((3, 4), bool)
        mask[0] = False
        out = _call(layer, q, kv, mask, scores=scores)
        out = out[0] if scores else out
        zq = q.copy()
        zq[:, 0] = 0
        uniform = _call(layer, zq, kv)[0, 0]
        kind = row_kind(out[0, 0], uniform, _call(layer, q, kv)[0, 0])
        return kind, "row 0, every key masked"
    return probe


def _float_mask():
    layer, q, kv = _layer()
    m = float_mask(3, 4)
    try:
        out = _call(layer, q, kv, m)
    except Exception as e:
        return "refused", f"{type(e).__name__}: {str(e)[:200]}"
    kind = float_kind(out, _call(layer, q, kv, m == 0), _call(layer, q, kv, m != 0))
    if kind == "finite_other":  # read as (1 - m) * -1e9: every key's score drowns in float32
        zero = _call(layer, np.zeros_like(q), kv, m == 0)  # equal scores, same keys
        if match(out, {"uniform_where_zero": zero}) == "uniform_where_zero":
            return "uniform_where_zero", ("0/-1e9 mask: uniform weights over the keys where "
                                          "the mask is 0 (added as (1 - m) * -1e9, the "
                                          "scores lost in float32)")
    return kind, f"0/-1e9 mask vs boolean masks: {kind}"


def _polarity():
    layer, q, kv = _layer()
    ones = np.ones((3, 4), bool)
    kind = polarity_kind(_call(layer, q, kv, ones), None, _call(layer, q, kv))
    return kind, "all-True mask equals no mask" if kind == "true_attends" else kind


def _causal():
    layer, q, kv = _layer()
    q = q[:, :2]
    upper, lower = causal_masks(2, 4)
    out = _call(layer, q, kv, use_causal_mask=True)
    kind = causal_kind(out, _call(layer, q, kv, upper), _call(layer, q, kv, lower),
                       _call(layer, q, kv))
    return kind, "use_causal_mask=True with T=2, S=4"


def _weights():
    layer, q, kv = _layer()
    _, w = _call(layer, q, kv, scores=True)
    kind = "per_head" if w.ndim == 4 else "head_averaged"
    return kind, f"return_attention_scores=True: shape {tuple(w.shape)}"


def probes(library):
    return {"fully_masked_row": _fully_masked(False),
            "fully_masked_row.scores": _fully_masked(True),
            "float_mask": _float_mask, "attn_mask_polarity": _polarity,
            "causal_flag": _causal, "returned_weights": _weights}
