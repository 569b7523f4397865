"""Flax attention modules (linen, nnx) and JAX's own `jax.nn.dot_product_attention`.

Flax modules are classified against their own outputs (a zero query row gives the
uniform row; boolean masks give the float-mask references); the JAX function against
the NumPy reference of common.py, since it takes projected tensors.
"""
from __future__ import annotations

import numpy as np
from common import (Absent, attention, causal_kind, causal_masks, float_kind, float_mask,
                    float_mask_probe, fully_masked_probe, inputs, polarity_kind, row_kind)

PACKAGES = ("flax", "jax", "jaxlib", "numpy")
IMPORTS = ("jax",)


def _linen():
    import jax
    from flax import linen
    layer = linen.MultiHeadDotProductAttention(num_heads=2, qkv_features=8)
    q, kv = inputs()
    params = layer.init(jax.random.PRNGKey(0), q, kv)

    def call(q, mask=None):
        m = None if mask is None else np.broadcast_to(mask, (1, 1) + mask.shape)
        return np.asarray(layer.apply(params, q, kv, mask=m))
    return call, q


def _nnx():
    try:
        from flax import nnx
    except ImportError as e:
        raise Absent(f"flax.nnx: {e}") from e
    layer = nnx.MultiHeadAttention(num_heads=2, in_features=8, qkv_features=8, decode=False,
                                   rngs=nnx.Rngs(0))
    q, kv = inputs()

    def call(q, mask=None):
        m = None if mask is None else np.broadcast_to(mask, (1, 1) + mask.shape)
        return np.asarray(layer(q, kv, mask=m))
    return call, q


def _module_probes(make):
    def fully_masked():
        call, q = make()
        mask = np.ones((3, 4), bool)
        mask[0] = False
        out = call(q, mask)
        zq = q.copy()
        zq[:, 0] = 0
        return row_kind(out[0, 0], call(zq)[0, 0], call(q)[0, 0]), \
            "row 0, every key masked"

    def floats():
        call, q = make()
        m = float_mask(3, 4)
        try:
            out = call(q, m)
        except Exception as e:
            return "refused", f"{type(e).__name__}: {str(e)[:200]}"
        return float_kind(out, call(q, m == 0), call(q, m != 0)), "0/-1e9 mask as mask="

    def polarity():
        call, q = make()
        return polarity_kind(call(q, np.ones((3, 4), bool)), None, call(q)), "all-True mask"
    return {"fully_masked_row": fully_masked, "float_mask": floats,
            "attn_mask_polarity": polarity}


def _dpa(mask=None, **kw):
    import jax
    if not hasattr(jax.nn, "dot_product_attention"):
        raise Absent("jax.nn.dot_product_attention does not exist in this release")
    q, kv = inputs(t=3 if mask is None or mask.shape[0] == 3 else mask.shape[0])
    q4 = q.reshape(1, q.shape[1], 2, 4)
    k4 = kv.reshape(1, 4, 2, 4)
    m = None if mask is None else np.broadcast_to(mask, (1, 2) + mask.shape)
    out = jax.nn.dot_product_attention(q4, k4, k4, mask=m, **kw)
    qh, kh = q4.transpose(0, 2, 1, 3), k4.transpose(0, 2, 1, 3)
    return np.asarray(out).transpose(0, 2, 1, 3), qh, kh


def _dpa_probes():
    def polarity():
        out, qh, kh = _dpa(np.ones((3, 4), bool))
        return polarity_kind(out, None, attention(qh, kh, kh)), "all-True mask"

    def causal():
        upper, lower = causal_masks(2, 4)
        out, qh, kh = _dpa(np.ones((2, 4), bool), is_causal=True)
        return causal_kind(out, attention(qh, kh, kh, upper), attention(qh, kh, kh, lower),
                           attention(qh, kh, kh)), "is_causal=True with T=2, S=4"
    return {"fully_masked_row": fully_masked_probe(_dpa, 3, 4),
            "float_mask": float_mask_probe(_dpa, 3, 4, "0/-1e9 array as mask="),
            "attn_mask_polarity": polarity, "causal_flag": causal}


def probes(library):
    if library == "jax":
        return {f"dot_product_attention.{k}": v for k, v in _dpa_probes().items()}
    cells = {f"linen.{k}": v for k, v in _module_probes(_linen).items()}
    cells.update({f"nnx.{k}": v for k, v in _module_probes(_nnx).items()})
    return cells
