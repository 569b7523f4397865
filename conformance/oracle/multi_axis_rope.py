"""Multi-axis rotary embeddings in float64 NumPy: M-RoPE (Qwen2-VL, arXiv 2409.12191
section 2.1; Qwen3-VL) and 2-D rope over a patch grid (Qwen2-VL's vision tower, Pixtral).

Each rotated pair i gets one axis a(i) and one inverse frequency f(i); the query or key
at per-axis positions p turns pair i by p[a(i)] * f(i), in the case's pairing (half-split
or interleaved dims, oracle/positional.rope_pairs).  case/multi_axis_rope.py says which
layout; here each is computed from the source it cites:
- mrope contiguous: f(i) = base ** (-2 i / d); pairs split into sections t, h, w in that
  order (transformers/models/qwen2_vl/modeling_qwen2_vl.py, Qwen2VLRotaryEmbedding.
  recomposition_frequencies: cat(m[i % 3] for i, m in enumerate(freq.split(mrope_section)))).
- mrope interleaved: the same f(i); pair i takes h where i % 3 == 1 and i < 3 sections[1],
  w where i % 3 == 2 and i < 3 sections[2], t otherwise (qwen3_vl/modeling_qwen3_vl.py,
  Qwen3VLTextRotaryEmbedding.recomposition_frequencies, slice(offset, length, 3)).
- grid_2d shared: the first d / 4 pairs take the row, the rest the column, both with
  f = base ** (-4 j / d), j < d / 4 (qwen2_vl Qwen2VLVisionRotaryEmbedding: inv_freq of a
  rope head_dim / 2 wide, cat([freq_h, freq_w])).
- grid_2d alternating: the same halves; the row takes f = base ** (-2 (2 j) / d), the
  column f = base ** (-2 (2 j + 1) / d): the even and odd frequencies of a d wide rope
  (pixtral/modeling_pixtral.py PixtralVisionRotaryEmbedding: cat([inv_freq[0::2],
  inv_freq[1::2]]), then H-W recomposition).
`one_axis` (every pair at the token's own sequence position, what a 1-D port computes)
is ordinary RoPE: the case without multi_axis.
"""
from __future__ import annotations

import numpy as np

from conformance.case.multi_axis_rope import MultiAxisRope, interleaved_axes
from conformance.oracle.positional import rope_pairs


def pair_plan(multi: MultiAxisRope, rotary_dim: int, base: float) -> tuple[np.ndarray,
                                                                            np.ndarray]:
    """((pairs,) axis of each rotated pair, (pairs,) its float64 inverse frequency)."""
    pairs, d = rotary_dim // 2, rotary_dim
    ladder = base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    if multi.kind == "mrope":
        if multi.layout == "contiguous":
            axes = np.repeat(np.arange(3), multi.sections)
        elif multi.layout == "interleaved":
            axes = np.asarray(interleaved_axes(multi.sections, pairs))
        else:
            raise ValueError(f"unknown mrope layout {multi.layout!r}")
        return axes, ladder
    quarter = pairs // 2
    axes = np.repeat(np.arange(2), [quarter, pairs - quarter])
    if multi.layout == "shared":
        half = base ** (-np.arange(0, d // 2, 2, dtype=np.float64) / (d // 2))
        return axes, np.concatenate([half, half])
    if multi.layout == "alternating":
        return axes, np.concatenate([ladder[0::2], ladder[1::2]])
    raise ValueError(f"unknown grid layout {multi.layout!r}")


def angles(multi: MultiAxisRope, positions, rotary_dim: int, base: float) -> np.ndarray:
    """(L, pairs) float64 angles of (axes, L) per-axis positions."""
    axes, freq = pair_plan(multi, rotary_dim, base)
    pos = np.asarray(positions, dtype=np.float64)  # (axes, L)
    return pos[axes].T * freq[None, :]


def rotate(x: np.ndarray, theta: np.ndarray, style: str, rotary_dim: int) -> np.ndarray:
    """(..., L, d) rotated pair by pair by (L, rotary_dim / 2) angles (or angles that
    broadcast to (..., L, rotary_dim / 2)); the rest passes."""
    a, b = rope_pairs(style, rotary_dim)
    cos, sin = np.cos(theta), np.sin(theta)
    out = np.array(x, dtype=np.float64, copy=True)
    xa, xb = x[..., a], x[..., b]
    out[..., a] = xa * cos - xb * sin
    out[..., b] = xa * sin + xb * cos
    return out


def rotated(case, q: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(B, H, T, d) queries and (B, H_kv, S, d) keys rotated at their per-axis positions."""
    r = case.attention.rope
    m = r.multi_axis
    if m.items is not None:  # (B, 1, L, pairs): each item at its own positions, keys alike
        theta = np.stack([angles(m, p, r.rotary_dim, float(r.base)) for p in m.items])[:, None]
        return (rotate(q, theta, r.style, r.rotary_dim), rotate(k, theta, r.style,
                                                                r.rotary_dim))
    q = rotate(q, angles(m, m.positions, r.rotary_dim, float(r.base)), r.style, r.rotary_dim)
    k = rotate(k, angles(m, m.key_positions, r.rotary_dim, float(r.base)), r.style,
               r.rotary_dim)
    return q, k
