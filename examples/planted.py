"""A port of attention with three convention defects planted, the kind that pass a shape
check and give silently wrong numbers (each one is a real porting bug):

1. the boolean mask is read True = blocked (nn.MultiheadAttention's polarity) by a function
   documented like F.scaled_dot_product_attention (True = attend);
2. grouped-query heads are mapped h % H_kv (np.tile) instead of h // (H / H_kv);
3. masked scores get -1e4 (an old BERT habit) instead of -inf.

    python -m conformance probe examples.planted:attention --kind sdpa --out /tmp/planted

The report names each defect and the nearest known system (tests/test_target_probe.py).
"""
from __future__ import annotations

import numpy as np


def attention(q, k, v, *, mask=None, is_causal=False, scale=None):
    """q (B, H, T, d), k (B, H_kv, S, d), v (B, H_kv, S, d_v) -> (B, H, T, d_v)."""
    heads, kv_heads = q.shape[1], k.shape[1]
    if kv_heads != heads:
        k = np.tile(k, (1, heads // kv_heads, 1, 1))  # defect 2: head h reads kv h % H_kv
        v = np.tile(v, (1, heads // kv_heads, 1, 1))
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q @ np.swapaxes(k, -1, -2)) * np.asarray(scale, q.dtype)
    if is_causal:
        t, s = scores.shape[-2:]
        scores = np.where(np.tril(np.ones((t, s), bool)), scores, -1e4)
    if mask is not None:
        if mask.dtype == bool:
            scores = np.where(mask, -1e4, scores)  # defects 1 and 3: True = blocked, -1e4
        else:
            scores = scores + mask
    scores = scores - scores.max(-1, keepdims=True)
    p = np.exp(scores)
    p = p / p.sum(-1, keepdims=True)
    return (p @ v).astype(q.dtype)
