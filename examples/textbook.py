"""A textbook scaled dot-product attention in NumPy (Vaswani et al. 2017, eq. 1), written
the way torch.nn.functional.scaled_dot_product_attention documents its arguments: a boolean
mask True = attend, masked scores set to -inf, grouped kv heads shared by consecutive query
heads (kv head h // (H / H_kv)), `is_causal` aligned to the upper left.

    python -m conformance probe examples.textbook:attention --kind sdpa --out /tmp/textbook
"""
from __future__ import annotations

import numpy as np


def attention(q, k, v, *, mask=None, is_causal=False, scale=None):
    """q (B, H, T, d), k (B, H_kv, S, d), v (B, H_kv, S, d_v) -> (B, H, T, d_v)."""
    heads, kv_heads = q.shape[1], k.shape[1]
    if kv_heads != heads:  # grouped-query: consecutive query heads share a kv head
        k = np.repeat(k, heads // kv_heads, axis=1)
        v = np.repeat(v, heads // kv_heads, axis=1)
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q @ np.swapaxes(k, -1, -2)) * np.asarray(scale, q.dtype)
    if is_causal:
        t, s = scores.shape[-2:]
        scores = np.where(np.tril(np.ones((t, s), bool)), scores, -np.inf)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf) if mask.dtype == bool else scores + mask
    scores = scores - scores.max(-1, keepdims=True)
    with np.errstate(invalid="ignore"):  # a row with no key: -inf - -inf = NaN
        p = np.exp(scores)
        p = p / p.sum(-1, keepdims=True)
    return (p @ v).astype(q.dtype)
