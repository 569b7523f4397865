"""The case fields of the attention features (Case.features), read and validated.

    attention.rope: {style: half_split | interleaved, rotary_dim: even <= qk_head_dim,
                     base: > 0}                     rotary embeddings on q and k
    attention.rope.scaling: {type: linear | dynamic | yarn | longrope | llama3,
                     factor: >= 1, original_max_positions: P, ...}
                                                    frequency scaling (ROPE_SCALING_FIELDS)
    attention.qk_norm: {kind: rms | layer, scope: per_head | all_heads, eps: > 0}
    attention.alibi: true                           the ALiBi bias (the paper's slopes)
    attention.softcap: c                            scores -> c * tanh(scores / c)
    attention.sinks: true                           one learned logit per head in the softmax
    inputs.position_offset: P0                      query positions start at P0 (RoPE, ALiBi,
    inputs.key_position_offset: K0                  windows); keys at K0 (default P0)
    mask.window: {left: L, right: R}                i - L <= j <= i + R, inclusive
    mask.fill: -inf | finfo_min | -1e9 | -1e4       the additive float mask's fill
    decode: {prefill: P, steps: N}                  causal self-attention over P + N
                                                    positions, run as a prefill then N steps

Each is defined once in the oracle (oracle/positional.py, oracle/reference.py) and
translated by every runner that has it; a runner without it says so (not
expressible).  The reader `r` is loader._Reader: `r.fail` names file, case, field.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Mapping

from conformance.case.model import (
    FILLS, QK_NORM_KINDS, QK_NORM_SCOPES, ROPE_MAGNITUDES, ROPE_SCALING_KINDS, ROPE_STYLES,
    Decode, QKNorm, Rope, RopeScaling, Window, short)
from conformance.case import positions_heads
from conformance.case.numbers import as_float

MAX_POSITION = 2**31 - 1  # positions fit an int32 in every framework
MAX_FACTOR = 1e6  # a context stretched a million times is a typo
# The fields of attention.rope.scaling each type takes besides type and factor, as
# transformers' rope_parameters name them (transformers/modeling_rope_utils.py)
ROPE_SCALING_FIELDS = {
    "linear": set(),
    "dynamic": {"original_max_positions"},
    "yarn": {"original_max_positions", "beta_fast", "beta_slow", "truncate", "mscale",
             "mscale_all_dim", "attention_factor", "magnitude"},
    "longrope": {"original_max_positions", "short_factor", "long_factor",
                 "attention_factor", "magnitude"},
    "llama3": {"original_max_positions", "low_freq_factor", "high_freq_factor"},
}


def _keys(r, value: Any, dotted: str, allowed: set[str], required: set[str]) -> Mapping:
    if not isinstance(value, Mapping):
        raise r.fail(dotted, f"must be a mapping with {sorted(allowed)}, got {short(value)}")
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise r.fail(f"{dotted}.{unknown[0]}", f"unknown field; valid: {sorted(allowed)}")
    missing = sorted(required - set(value))
    if missing:
        raise r.fail(f"{dotted}.{missing[0]}", "is required")
    return value


def _positive(r, value: Any, dotted: str, upper: float = 1e30) -> float:
    x = as_float(value)
    if not (math.isfinite(x) and 0 < x <= upper):
        raise r.fail(dotted, f"must be a finite number in (0, {upper:g}], got {short(value)}")
    return x


def rope(r, sec: Mapping, head_dim: int) -> Rope | None:
    if sec.get("rope") is None:
        return None
    s = _keys(r, sec["rope"], "attention.rope", {"style", "rotary_dim", "base", "scaling",
                                                      "multi_axis"},
              {"style"})
    style = r.choice(s, "style", "attention.rope.style", "", ROPE_STYLES)
    dim = r.integer(s, "rotary_dim", "attention.rope.rotary_dim", head_dim, minimum=2)
    if dim % 2 or dim > head_dim:
        raise r.fail("attention.rope.rotary_dim", f"must be even and at most qk_head_dim "
                     f"({head_dim}): pairs of dimensions rotate, got {dim}")
    return Rope(style, dim, _positive(r, s.get("base", 10000.0), "attention.rope.base"),
                rope_scaling(r, s, dim))


def rope_scaling(r, sec: Mapping, rotary_dim: int) -> RopeScaling | None:
    """attention.rope.scaling, each type with its own fields and transformers' defaults
    (beta 32 / 1, truncate, llama3 bands 1 / 4, the factor's place on cos and sin)."""
    if sec.get("scaling") is None:
        return None
    at = "attention.rope.scaling"
    raw = sec["scaling"]
    if not isinstance(raw, Mapping):
        raise r.fail(at, "must be a mapping with type, factor and the type's own fields, "
                     f"e.g. {{type: linear, factor: 8}}, got {short(raw)}")
    kind = r.choice(raw, "type", f"{at}.type", "", ROPE_SCALING_KINDS)
    extra = ROPE_SCALING_FIELDS[kind]
    s = _keys(r, raw, at, {"type", "factor"} | extra, {"factor"} | (
        extra & {"original_max_positions", "short_factor", "long_factor"}))
    factor = _positive(r, s["factor"], f"{at}.factor", MAX_FACTOR)
    if factor < 1:
        raise r.fail(f"{at}.factor", f"must be >= 1 (a context stretched, not shrunk), "
                     f"got {short(s['factor'])}")
    if kind == "dynamic" and rotary_dim < 4:
        raise r.fail("attention.rope.rotary_dim", "dynamic NTK raises the base to the "
                     f"power rotary_dim / (rotary_dim - 2): give rotary_dim >= 4, got {rotary_dim}")
    orig = (r.integer(s, "original_max_positions", f"{at}.original_max_positions")
            if "original_max_positions" in extra else None)
    scaling = RopeScaling(kind, factor, orig)
    if kind == "yarn":
        return _yarn(r, s, scaling)
    if kind == "llama3":
        return _llama3(r, s, scaling)
    if kind == "longrope":
        return _longrope(r, s, scaling, rotary_dim)
    return scaling


def _optional(r, s: Mapping, name: str, default: float | None = None) -> float | None:
    value = s.get(name, default)
    return None if value is None else _positive(r, value, f"attention.rope.scaling.{name}")


def _magnitude(r, s: Mapping) -> str:
    return r.choice(s, "magnitude", "attention.rope.scaling.magnitude", "cos_sin",
                    ROPE_MAGNITUDES)


def _yarn(r, s: Mapping, scaling: RopeScaling) -> RopeScaling:
    at = "attention.rope.scaling"
    fast, slow = _optional(r, s, "beta_fast", 32.0), _optional(r, s, "beta_slow", 1.0)
    if fast <= slow:
        raise r.fail(f"{at}.beta_fast", f"must exceed beta_slow ({slow:g}): the ramp runs "
                     f"from beta_fast rotations down to beta_slow, got {fast:g}")
    y = replace(scaling, beta_fast=fast, beta_slow=slow,
                truncate=r.boolean(s, "truncate", f"{at}.truncate", True),
                mscale=_optional(r, s, "mscale"), mscale_all_dim=_optional(r, s, "mscale_all_dim"),
                attention_factor=_optional(r, s, "attention_factor"), magnitude=_magnitude(r, s))
    if (y.magnitude == "softmax_scale" and y.attention_factor is None and y.mscale
            and y.mscale_all_dim and y.mscale != y.mscale_all_dim):
        raise r.fail(f"{at}.mscale", "with magnitude softmax_scale give mscale equal to "
                     f"mscale_all_dim ({y.mscale_all_dim:g}), or attention_factor: otherwise "
                     "DeepSeek's cos and sin carry mscale / mscale_all_dim besides the softmax "
                     f"scale's mscale_all_dim factor, got {y.mscale:g}")
    return y


def _llama3(r, s: Mapping, scaling: RopeScaling) -> RopeScaling:
    low = _optional(r, s, "low_freq_factor", 1.0)
    high = _optional(r, s, "high_freq_factor", 4.0)
    if high < low:  # equal is Llama 4 Scout's (1, 1): two bands, none smoothed
        raise r.fail("attention.rope.scaling.high_freq_factor", f"must be at least "
                     f"low_freq_factor ({low:g}): wavelengths below original / high keep their "
                     f"frequency, above original / low are divided by factor, got {high:g}")
    return replace(scaling, low_freq_factor=low, high_freq_factor=high)


def _per_pair(r, s: Mapping, name: str, pairs: int) -> tuple[float, ...]:
    dotted = f"attention.rope.scaling.{name}"
    value = s[name]
    if not isinstance(value, (list, tuple)) or len(value) != pairs:
        raise r.fail(dotted, f"must be a list of rotary_dim / 2 = {pairs} numbers (one per "
                     f"rotated pair), got {short(value)}")
    return tuple(_positive(r, x, f"{dotted}[{i}]") for i, x in enumerate(value))


def _longrope(r, s: Mapping, scaling: RopeScaling, rotary_dim: int) -> RopeScaling:
    pairs = rotary_dim // 2
    return replace(scaling, short_factor=_per_pair(r, s, "short_factor", pairs),
                   long_factor=_per_pair(r, s, "long_factor", pairs),
                   attention_factor=_optional(r, s, "attention_factor"),
                   magnitude=_magnitude(r, s))


def qk_norm(r, sec: Mapping) -> QKNorm | None:
    if sec.get("qk_norm") is None:
        return None
    s = _keys(r, sec["qk_norm"], "attention.qk_norm", {"kind", "scope", "eps"},
              {"kind", "scope"})
    return QKNorm(r.choice(s, "kind", "attention.qk_norm.kind", "", QK_NORM_KINDS),
                  r.choice(s, "scope", "attention.qk_norm.scope", "", QK_NORM_SCOPES),
                  _positive(r, s.get("eps", 1e-6), "attention.qk_norm.eps", 1.0))


def attention(r, sec: Mapping, att):
    """`att` with rope, qk_norm, alibi, softcap and sinks read from `sec`."""
    cap = None
    if sec.get("softcap") is not None:
        cap = _positive(r, sec["softcap"], "attention.softcap", 1e6)
    return replace(att, rope=rope(r, sec, att.qk_head_dim), qk_norm=qk_norm(r, sec),
                   alibi=r.boolean(sec, "alibi", "attention.alibi", False), softcap=cap,
                   sinks=r.boolean(sec, "sinks", "attention.sinks", False))


def inputs(r, sec: Mapping, inp):
    """`inp` with the position offsets read from `sec`."""
    p0 = r.integer(sec, "position_offset", "inputs.position_offset", 0, minimum=0)
    k0 = r.integer(sec, "key_position_offset", "inputs.key_position_offset", p0, minimum=0)
    if max(p0 + inp.query_len, k0 + inp.key_len) > MAX_POSITION:
        raise r.fail("inputs.position_offset", f"positions must stay below 2**31 - 1, got "
                     f"{max(p0 + inp.query_len, k0 + inp.key_len)}")
    if inp.self_attention and k0 != p0:
        raise r.fail("inputs.key_position_offset", "self-attention has one sequence: its "
                     f"key positions are its query positions ({p0}); leave it out")
    return replace(inp, position_offset=p0, key_position_offset=k0)


def window(r, sec: Mapping) -> Window | None:
    if sec.get("window") is None:
        return None
    s = _keys(r, sec["window"], "mask.window", {"left", "right"}, set())
    sides = [None if s.get(k) is None else r.integer(s, k, f"mask.window.{k}", minimum=0)
             for k in ("left", "right")]
    if sides == [None, None]:
        raise r.fail("mask.window", "give left, right or both (keys counted on each side "
                     "of the query, inclusive): e.g. {left: 3, right: 0}")
    return Window(*sides)


def fill(r, sec: Mapping) -> str | None:
    value = sec.get("fill")
    if value is None:
        return None
    x = as_float(value)
    word = {-math.inf: "-inf", -1e9: "-1e9", -1e4: "-1e4"}.get(x, value)
    if word not in FILLS:
        raise r.fail("mask.fill", f"must be one of {list(FILLS)}, got {short(value)}")
    return word


def decode(r, raw: Mapping, inp, mask) -> Decode | None:
    if raw.get("decode") is None:
        return None
    s = _keys(r, raw["decode"], "decode", {"prefill", "steps"}, {"prefill", "steps"})
    d = Decode(r.integer(s, "prefill", "decode.prefill"), r.integer(s, "steps", "decode.steps"))
    if not inp.self_attention:
        raise r.fail("decode", "decoding is self-attention: set inputs.self_attention: true")
    if inp.query_len != d.prefill + d.steps:
        raise r.fail("decode", f"prefill + steps ({d.prefill + d.steps}) must equal "
                     f"inputs.query_len ({inp.query_len}): the full forward it must equal")
    if mask.causal == "none":
        raise r.fail("decode", "decoding is causal: set mask.causal: upper_left (self-"
                     "attention: both alignments are the same)")
    return d


def read(r, att, inp, mask):
    """The case's attention, inputs and mask with their feature fields, and its decode."""
    att = attention(r, r.section("attention"), att)
    inp = inputs(r, r.section("inputs"), inp)
    m = r.section("mask")
    mask = replace(mask, window=window(r, m), fill=fill(r, m))
    att, mask = positions_heads.read(r, att, inp, mask)  # M-RoPE, schedules, MLA...
    return att, inp, mask, decode(r, r.raw, inp, mask)
