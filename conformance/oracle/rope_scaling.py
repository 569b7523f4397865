"""RoPE frequency scaling in float64 NumPy: the inverse frequency of each rotated pair
and the attention factor, for each type a case may ask for (case/model.py RopeScaling).

Unscaled, pair i turns by inv_freq_i = base ** (-2 i / d) per position (d the rotary
dim).  Each type changes inv_freq, and YaRN and LongRoPE add a magnitude:
- linear (kaiokendev's position interpolation; transformers/modeling_rope_utils.py
  _compute_linear_scaling_rope_parameters): inv_freq / factor.
- dynamic NTK (/u/bloc97, /u/emozilla; _compute_dynamic_ntk_parameters): the base
  becomes base * (factor * L / P - (factor - 1)) ** (d / (d - 2)), L the context length
  (largest position + 1, at least P = original_max_positions), so positions below P
  keep the unscaled frequencies and the base grows with the length.
- yarn (Peng et al. 2023, arXiv 2309.00071, section 3.2 "NTK-by-parts";
  _compute_yarn_parameters): pairs turning more than beta_fast times over P keep their
  frequency, pairs turning fewer than beta_slow times are divided by factor, a linear
  ramp in between; `truncate` rounds the ramp's edges to whole dimensions (floor, ceil).
  Its attention factor (section 3.4, eq. 22: sqrt(1/t) = 0.1 ln(factor) + 1) is
  get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim) where both are given
  (transformers' ratio), else get_mscale(factor).
- longrope (Ding et al. 2024, arXiv 2402.13753, Phi-3; _compute_longrope_parameters):
  inv_freq / ext_i with ext the long factors when L > P, else the short ones; attention
  factor sqrt(1 + ln(factor) / ln(P)).
- llama3 (Meta's llama3 scaling, llama-models `apply_scaling`; _compute_llama3_parameters):
  wavelengths 2 pi / inv_freq below P / high_freq_factor keep their frequency, above
  P / low_freq_factor are divided by factor, and between them the frequency is
  (1 - s) inv_freq / factor + s inv_freq with s = (P / wavelength - low) / (high - low).

Where the magnitude lands (RopeScaling.magnitude) is the case's word: `cos_sin`
multiplies the rotated dims of q and k each by it (transformers' Llama line: cos and sin
times attention_scaling), `softmax_scale` multiplies the softmax scale by its square and
leaves cos and sin at 1 (transformers/models/deepseek_v3/modeling_deepseek_v3.py:
self.scaling * mscale * mscale, mscale = yarn_get_mscale(factor, mscale_all_dim)).
"""
from __future__ import annotations

import math

import numpy as np

from conformance.case.model import ROPE_SCALING_KINDS, Rope, RopeScaling


def unscaled_inv_freq(rotary_dim: int, base: float) -> np.ndarray:
    """(rotary_dim / 2,) base ** (-2 i / rotary_dim)."""
    return base ** (-np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)


def context_length(positions) -> int:
    """The length a system derives from the positions it is given: largest + 1 (the
    `torch.max(position_ids) + 1` of transformers' dynamic_rope_update)."""
    return int(np.max(np.asarray(positions))) + 1


def inv_freq(rope: Rope, positions) -> np.ndarray:
    """(rotary_dim / 2,) float64 inverse frequencies of `rope` for a sequence holding
    `positions` (dynamic and longrope depend on its largest position; the others not)."""
    d, base, s = rope.rotary_dim, float(rope.base), rope.scaling
    plain = unscaled_inv_freq(d, base)
    if s is None:
        return plain
    if s.kind == "linear":
        return plain / s.factor
    if s.kind == "dynamic":
        length = max(context_length(positions), s.original_max_positions)
        grown = base * (s.factor * length / s.original_max_positions - (s.factor - 1)) ** (
            d / (d - 2))
        return unscaled_inv_freq(d, grown)
    if s.kind == "yarn":
        return yarn_inv_freq(d, base, s)
    if s.kind == "longrope":
        long = context_length(positions) > s.original_max_positions
        return plain / np.asarray(s.long_factor if long else s.short_factor, dtype=np.float64)
    if s.kind == "llama3":
        return llama3_inv_freq(plain, s)
    raise ValueError(f"unknown rope scaling {s.kind!r}; known: {ROPE_SCALING_KINDS}")


def yarn_ramp_edges(rotary_dim: int, base: float, s: RopeScaling) -> tuple[float, float]:
    """The dimensions where YaRN's ramp starts and ends: the dimension whose pair turns
    beta_fast (resp. beta_slow) times over original_max_positions, floored (resp.
    ceiled) when truncating, clamped to [0, rotary_dim - 1]."""
    def dim_of(rotations: float) -> float:
        return (rotary_dim * math.log(s.original_max_positions / (rotations * 2 * math.pi))
                / (2 * math.log(base)))

    low, high = dim_of(s.beta_fast), dim_of(s.beta_slow)
    if s.truncate:
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0), min(high, rotary_dim - 1)


def yarn_inv_freq(rotary_dim: int, base: float, s: RopeScaling) -> np.ndarray:
    """Interpolated (inv_freq / factor) past the ramp, extrapolated (unchanged) before it."""
    low, high = yarn_ramp_edges(rotary_dim, base, s)
    if low == high:
        high += 0.001  # transformers' guard against a zero-width ramp
    ramp = np.clip((np.arange(rotary_dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    plain = unscaled_inv_freq(rotary_dim, base)
    return plain / s.factor * ramp + plain * (1 - ramp)


def llama3_inv_freq(plain: np.ndarray, s: RopeScaling) -> np.ndarray:
    """Three bands by wavelength: kept, divided by factor, and smoothed between."""
    wavelength = 2 * math.pi / plain
    low_edge = s.original_max_positions / s.low_freq_factor  # longer: divided
    high_edge = s.original_max_positions / s.high_freq_factor  # shorter: kept
    out = np.where(wavelength > low_edge, plain / s.factor, plain)
    if s.high_freq_factor == s.low_freq_factor:  # Llama 4 Scout's (1, 1): no middle band
        return out
    smooth = ((s.original_max_positions / wavelength - s.low_freq_factor)
              / (s.high_freq_factor - s.low_freq_factor))
    middle = (1 - smooth) * plain / s.factor + smooth * plain
    return np.where((wavelength >= high_edge) & (wavelength <= low_edge), middle, out)


def yarn_get_mscale(factor: float, mscale: float = 1.0) -> float:
    """0.1 * mscale * ln(factor) + 1 (1 at factor <= 1): YaRN's sqrt(1/t), eq. 22."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def magnitude(rope: Rope) -> float:
    """The attention factor of `rope`'s scaling, applied where RopeScaling.magnitude
    says (1.0 without scaling, and for linear, dynamic and llama3).  Given, it is
    attention_factor.  On cos and sin it is what transformers' ROPE_INIT_FUNCTIONS return;
    on the softmax scale (squared there) it is DeepSeek V3's yarn_get_mscale(factor,
    mscale_all_dim), taking mscale, then 1, where mscale_all_dim is not given (the
    loader asks mscale to equal mscale_all_dim there, so DeepSeek's cos and sin stay 1)."""
    s = rope.scaling
    if s is None or s.kind not in ("yarn", "longrope"):
        return 1.0
    if s.attention_factor is not None:
        return float(s.attention_factor)
    if s.kind == "longrope":
        if s.factor <= 1:
            return 1.0
        return math.sqrt(1 + math.log(s.factor) / math.log(s.original_max_positions))
    if s.magnitude == "softmax_scale":  # DeepSeek: mscale_all_dim's factor, squared
        return yarn_get_mscale(s.factor, s.mscale_all_dim or s.mscale or 1.0)
    if s.mscale and s.mscale_all_dim:
        return yarn_get_mscale(s.factor, s.mscale) / yarn_get_mscale(s.factor, s.mscale_all_dim)
    return yarn_get_mscale(s.factor)


def placement(rope: Rope | None) -> str | None:
    """Where the magnitude lands: "cos_sin", "softmax_scale", or None when it is 1."""
    if rope is None or rope.scaling is None or magnitude(rope) == 1.0:
        return None
    return rope.scaling.magnitude or "cos_sin"
