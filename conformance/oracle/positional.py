"""Rotary embeddings, QK-norm, ALiBi, softcap, sinks and windows, each from its paper,
in float64 NumPy.

Rotary embeddings (RoPE; Su et al. 2021, "RoFormer", eq. 34): the query or key
vector at position m is rotated pair by pair, pair i by the angle
m * base ** (-2i / rotary_dim).  Which two dimensions form pair i is the
convention that splits the field:
- `interleaved`: dimensions (2i, 2i + 1), as RoFormer writes it (Meta's Llama
  reference code, GPT-J, MLX `traditional=True`);
- `half_split`: dimensions (i, i + rotary_dim / 2) (GPT-NeoX, HF Llama,
  `rotate_half`).
Only the first `rotary_dim` dimensions of a head rotate; the rest pass through.

ALiBi (Press et al. 2022, "Train Short, Test Long", section 3): head h adds
slope_h * (key position - query position) to its scores.  The slopes are the
geometric sequence 2 ** (-8 (h + 1) / n) for n a power of two; for another
head count the paper (footnote, and its reference code `get_slopes`) takes the
n' = 2 ** floor(log2 n) slopes of n' and then every other slope of 2 n' until
n are chosen.  (The paper writes -m (i - j) for keys j <= i; this is the same
number, and for keys after the query it grows instead of vanishing: a
bidirectional case asks for exactly that bias.)

QK-norm (RMSNorm, Zhang and Sennrich 2019; LayerNorm, Ba et al. 2016): the
projected queries and keys are normalised before RoPE and the scores, either
each head's d_k values apart (`per_head`: Qwen3, Gemma3) or the whole
projection of all heads at once (`all_heads`: OLMo2), with a learned scale (and
bias for LayerNorm) of that width.

Softcapping (Gemma 2): scores become c * tanh(scores / c), after the softmax
scale and before the mask.  Attention sinks (GPT-OSS): one learned logit per
head joins the softmax's denominator and takes no value.
"""
from __future__ import annotations

import math

import numpy as np

from conformance.case.model import QK_NORM_KINDS, QK_NORM_SCOPES, ROPE_STYLES  # noqa: F401


def rope_pairs(style: str, rotary_dim: int) -> tuple[np.ndarray, np.ndarray]:
    """The two dimension indices of each rotated pair i (i < rotary_dim / 2)."""
    half = rotary_dim // 2
    i = np.arange(half)
    if style == "interleaved":
        return 2 * i, 2 * i + 1
    if style == "half_split":
        return i, i + half
    raise ValueError(f"unknown rope style {style!r}; known: {ROPE_STYLES}")


def rope_angles(positions: np.ndarray, rotary_dim: int, base: float,
                inv_freq: np.ndarray | None = None) -> np.ndarray:
    """(L,) positions -> (L, rotary_dim / 2) angles m * inv_freq_i, inv_freq_i
    = base ** (-2 i / rotary_dim) unless given (scaled: oracle/rope_scaling.py)."""
    if inv_freq is None:
        inv_freq = base ** (-np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)
    return np.asarray(positions, dtype=np.float64)[:, None] * inv_freq[None, :]


def apply_rope(x: np.ndarray, positions: np.ndarray, style: str, rotary_dim: int,
               base: float, inv_freq: np.ndarray | None = None) -> np.ndarray:
    """Rotate (..., L, d) vectors at `positions` (L,); dimensions past rotary_dim pass."""
    if rotary_dim % 2 or not 0 < rotary_dim <= x.shape[-1]:
        raise ValueError(f"rotary_dim must be even and in 2..{x.shape[-1]}, got {rotary_dim}")
    a, b = rope_pairs(style, rotary_dim)
    theta = rope_angles(positions, rotary_dim, base, inv_freq)
    cos, sin = np.cos(theta), np.sin(theta)
    out = np.array(x, dtype=np.float64, copy=True)
    xa, xb = x[..., a], x[..., b]
    out[..., a] = xa * cos - xb * sin
    out[..., b] = xa * sin + xb * cos
    return out


def alibi_slopes(num_heads: int) -> np.ndarray:
    """The paper's slopes for `num_heads` heads, with its rule for other head counts."""
    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    if num_heads < 1:
        raise ValueError(f"num_heads must be positive, got {num_heads}")
    closest = 2 ** int(math.floor(math.log2(num_heads)))
    slopes = power_of_two(closest)
    if closest != num_heads:
        slopes += power_of_two(2 * closest)[0::2][:num_heads - closest]
    return np.asarray(slopes, dtype=np.float64)


def alibi_bias(num_heads: int, query_positions: np.ndarray,
               key_positions: np.ndarray) -> np.ndarray:
    """(H, T, S): slope_h * (key position - query position)."""
    rel = (np.asarray(key_positions, dtype=np.float64)[None, :]
           - np.asarray(query_positions, dtype=np.float64)[:, None])
    return alibi_slopes(num_heads)[:, None, None] * rel[None]


def qk_norm(x: np.ndarray, kind: str, scope: str, weight: np.ndarray,
            bias: np.ndarray | None, eps: float) -> np.ndarray:
    """Normalise (B, H, L, d) projections per head or over all heads' H * d values.

    `weight` (and `bias`, LayerNorm only) has shape (d,) per head or (H, d) over all."""
    if scope == "per_head":
        axes: tuple[int, ...] = (-1,)
    elif scope == "all_heads":
        axes = (1, 3)
    else:
        raise ValueError(f"unknown qk_norm scope {scope!r}; known: {QK_NORM_SCOPES}")
    if kind == "rms":
        y = x / np.sqrt(np.mean(x * x, axis=axes, keepdims=True) + eps)
    elif kind == "layer":
        centred = x - np.mean(x, axis=axes, keepdims=True)
        y = centred / np.sqrt(np.mean(centred * centred, axis=axes, keepdims=True) + eps)
    else:
        raise ValueError(f"unknown qk_norm kind {kind!r}; known: {QK_NORM_KINDS}")
    shaped = weight if scope == "per_head" else weight[:, None, :]
    y = y * shaped
    if bias is not None:
        y = y + (bias if scope == "per_head" else bias[:, None, :])
    return y


def softcap(scores: np.ndarray, cap: float) -> np.ndarray:
    """cap * tanh(scores / cap)."""
    return cap * np.tanh(scores / cap)


def softmax_with_sinks(scores: np.ndarray, allowed: np.ndarray | None,
                       sinks: np.ndarray | None) -> np.ndarray:
    """Softmax over the last axis of (B, H, T, S) scores, masked where `allowed`
    (B, T, S) is False; with `sinks` (H,), each head's sink logit joins the
    denominator and is dropped (its weight goes to no value).  A row with no
    allowed key and no sink is NaN, as in the reference."""
    if allowed is not None:
        scores = np.where(allowed[:, None], scores, -np.inf)
    peak = scores.max(-1, keepdims=True)
    if sinks is not None:
        peak = np.maximum(peak, sinks[None, :, None, None])
    with np.errstate(invalid="ignore"):
        e = np.exp(scores - peak)
        total = e.sum(-1, keepdims=True)
        if sinks is not None:
            total = total + np.exp(sinks[None, :, None, None] - peak)
        return e / total


def window_allowed(query_positions: np.ndarray, key_positions: np.ndarray, left: int | None,
                   right: int | None) -> np.ndarray:
    """(T, S): query at position i may attend key at j with i - left <= j <= i + right
    (inclusive); None leaves that side unbounded."""
    i = np.asarray(query_positions)[:, None]
    j = np.asarray(key_positions)[None, :]
    ok = np.ones((i.shape[0], j.shape[1]), dtype=bool)
    if left is not None:
        ok &= j >= i - left
    if right is not None:
        ok &= j <= i + right
    return ok
