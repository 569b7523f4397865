"""Llama 4's chunked attention and attention temperature in float64 NumPy (case/chunked.py).

- mask.chunk C: query position p attends key position s only where p // C == s // C, both
  absolute (inputs.position_offset + t), ANDed with the case's causal mask by canonical.py
  (transformers/masking_utils.py `chunked_overlay`#L102-L111 with `causal_mask_function`;
  mlx_lm/models/llama4.py LlamaModel.__call__#L237-L244: linds // chunk == rinds // chunk,
  linds <= rinds).  It is block-diagonal: the first query of a block sees one key, not the
  C keys a sliding window of C would give it.
- attention.temperature (F, a): each query at absolute position p is multiplied by
  log1p(floor((p + 1) / F)) * a + 1 after RoPE and QK-norm, before the scores
  (transformers/models/llama4/modeling_llama4.py Llama4TextAttention.forward#L360-L367;
  mlx_lm/models/llama4.py Attention.__call__#L115-L125 writes it log(floor((p + 1) / F) + 1)),
  so it is exactly 1 for p + 1 < F, log1p(1) a + 1 from p = F - 1 on.
"""
from __future__ import annotations

import numpy as np


def chunk_allowed(qpos: np.ndarray, kpos: np.ndarray, chunk: int) -> np.ndarray:
    """(T, S) True where query position qpos[t] and key position kpos[s] share a block of
    `chunk` absolute positions (the causal part is the case's own mask)."""
    return (np.asarray(qpos)[:, None] // chunk) == (np.asarray(kpos)[None, :] // chunk)


def temperature(positions: np.ndarray, floor_scale: int, attn_scale: float) -> np.ndarray:
    """(T,) float64 query multipliers at absolute `positions`: Llama 4's
    log1p(floor((p + 1) / floor_scale)) * attn_scale + 1."""
    p = np.asarray(positions, dtype=np.float64)
    return np.log1p(np.floor((p + 1.0) / floor_scale)) * attn_scale + 1.0


def tempered(q: np.ndarray, qpos: np.ndarray, t) -> np.ndarray:
    """(B, H, T, d) queries each multiplied by its position's temperature (t: the case's
    AttentionTemperature)."""
    return q * temperature(qpos, t.floor_scale, t.attn_scale)[None, None, :, None]
