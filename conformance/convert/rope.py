"""The W_q / W_k row permutation between interleaved (Meta) and half-split (HF) RoPE.

Meta's Llama checkpoints rotate adjacent pairs (2i, 2i + 1); HF's Llama code
rotates (i, i + d/2) (`rotate_half`).  HF's converter
(`transformers/models/llama/convert_llama_weights_to_hf.py`, `permute`) therefore
reorders the output rows of W_q and W_k head by head, so that half-split
attention with the permuted weights computes exactly what interleaved attention
computes with the original ones:

    w.view(n_heads, dim1 // n_heads // 2, 2, dim2).transpose(1, 2).reshape(dim1, dim2)

Within each head, new row a * (r/2) + i is old row 2i + a.  The key rows have
`num_kv_heads` heads: permuting them with the query head count (a bug seen in
several converters: ggml-org/llama.cpp#2376, karpathy/llama2.c#286) reorders
rows across head boundaries and gives wrong keys whenever num_kv_heads <
num_heads.  With partial rotary (`rotary_dim` r < d) only the first r rows of a
head move.  Pure NumPy; an (out, in) weight or an (out,) bias.
"""
from __future__ import annotations

import numpy as np

from conformance.convert._core import ConversionError


def head_permutation(head_dim: int, rotary_dim: int | None = None) -> np.ndarray:
    """Index array p with half_split_row[j] = interleaved_row[p[j]] within one head."""
    r = head_dim if rotary_dim is None else rotary_dim
    if r % 2 or not 0 < r <= head_dim:
        raise ConversionError(f"rotary_dim must be even and in 2..{head_dim}, got {r}")
    half = r // 2
    rotated = np.concatenate([2 * np.arange(half), 2 * np.arange(half) + 1])
    return np.concatenate([rotated, np.arange(r, head_dim)])


def _rows(w: np.ndarray, num_heads: int, rotary_dim: int | None, inverse: bool) -> np.ndarray:
    w = np.asarray(w)
    if w.shape[0] % num_heads:
        raise ConversionError(f"{w.shape[0]} rows do not split into {num_heads} heads")
    d = w.shape[0] // num_heads
    p = head_permutation(d, rotary_dim)
    if inverse:
        p = np.argsort(p)
    index = (np.arange(num_heads)[:, None] * d + p[None, :]).ravel()
    return w[index]


def interleaved_to_half_split(w: np.ndarray, num_heads: int,
                              rotary_dim: int | None = None) -> np.ndarray:
    """Meta (interleaved) -> HF (half-split) rows of one projection; `num_heads` is the
    projection's own head count (num_kv_heads for W_k)."""
    return _rows(w, num_heads, rotary_dim, inverse=False)


def half_split_to_interleaved(w: np.ndarray, num_heads: int,
                              rotary_dim: int | None = None) -> np.ndarray:
    """HF (half-split) -> Meta (interleaved): the inverse permutation."""
    return _rows(w, num_heads, rotary_dim, inverse=True)
