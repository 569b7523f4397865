"""The case types: frozen dataclasses, constants, tolerance defaults, budgets and
the limits of reading a file (yaml_reader.py reads within them).

No imports from the rest of the package, so that anything may import it;
`conformance/case/loader.py` validates documents into these types and re-exports
every public name.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from conformance.case.bounded import cut, short  # noqa: F401 (re-exported)
from conformance.case.limits import (  # noqa: F401 (re-exported: the case's budgets)
    ACTIVATION_ENV, DEFAULT_MAX_ACTIVATION_ELEMENTS, DEFAULT_MAX_WEIGHT_ELEMENTS, LOAD_ENV,
    LOAD_LIMIT_ELEMENTS, WEIGHT_ENV, Budget, load_budget, load_limit)

if TYPE_CHECKING:  # each in its own module (case/positions_heads.py reads them)
    from conformance.case.chunked import AttentionTemperature
    from conformance.case.latent_attention import LatentAttention
    from conformance.case.layer_schedule import LayerSchedule
    from conformance.case.multi_axis_rope import MultiAxisRope
    from conformance.case.output_gate import OutputGate
    from conformance.case.relative_bias import RelativeBias


DTYPES = ("float32", "float64", "float16", "bfloat16")
CAUSAL = ("none", "upper_left", "lower_right")
# Edge case -> what a system does there, each label checked numerically (compare/agreement.py)
BEHAVIOURS = {
    "fully_masked_row": ("nan", "zeros", "uniform", "finite_other", "error"),
    "nonfinite_input": ("nan_propagates", "contained", "partial", "nan_spreads", "overflow_inf",
                        "error")}
BIAS_VALUES = ("random", "zeros")
# The attention features (case/features.py reads them; oracle/positional.py computes them)
ROPE_STYLES = ("half_split", "interleaved")
# RoPE frequency scaling types (transformers' rope_type words; oracle/rope_scaling.py)
ROPE_SCALING_KINDS = ("linear", "dynamic", "yarn", "longrope", "llama3")
# Where a scaling's attention factor lands: on cos and sin (transformers' Llama line), or
# squared on the softmax scale with cos and sin left at 1 (transformers' DeepSeek V3)
ROPE_MAGNITUDES = ("cos_sin", "softmax_scale")
QK_NORM_KINDS = ("rms", "layer")
QK_NORM_SCOPES = ("per_head", "all_heads")
FILLS = ("-inf", "finfo_min", "-1e9", "-1e4")  # the additive float mask's fill

# Case files are untrusted input: limits on what reading one may cost.
MAX_FILE_BYTES = 1_000_000  # a case file is a few KB; refuse anything over 1 MB
MAX_YAML_NODES = 10_000  # scalars, sequences, mappings and aliases as written
MAX_EXPANDED_NODES = 100_000  # the same with every alias expanded
MAX_DEPTH = 32  # nesting of sequences and mappings (aliases expanded)
MAX_MESSAGE = 1_000  # characters of a CaseError message
# The field names of the format (conformance/case/case.schema.json publishes the same).
_TOP = {"id", "title", "description", "source", "tags", "attention", "inputs", "mask",
        "expect", "weights", "typed", "decode"}
_SECTIONS = {
    "attention": {"num_heads", "num_kv_heads", "query_features", "key_features",
                  "value_features", "qk_head_dim", "v_head_dim", "output_features", "bias",
                  "scale", "rope", "qk_norm", "alibi", "softcap", "sinks", "layer_schedule",
                  "temperature", "mla", "relative_bias", "output_gate"},
    "inputs": {"batch", "query_len", "key_len", "self_attention", "dtype", "seed", "scale",
               "nonfinite", "position_offset", "key_position_offset"},
    "mask": {"causal", "key_padding", "attn_mask", "masked_rows", "window", "fill", "chunk"},
    "expect": {"parameters", "tolerance", "behaviours", "known_mismatch"},
    "weights": {"bias_values"},
}

class CaseError(ValueError):
    """A case file that cannot be used, with where and how to fix it.

    The message is bounded (MAX_MESSAGE characters) whatever the file holds."""

    def __init__(self, path: Path | str, case_id: str | None, field_name: str, problem: str):
        self.path, self.case_id = cut(str(path), 300), case_id
        self.field_name, self.problem = cut(str(field_name), 200), str(problem)
        where = f"{self.path}: case {short(case_id, 120)}" if case_id else self.path
        super().__init__(cut(f"{where}: field '{self.field_name}': {self.problem}", MAX_MESSAGE))


@dataclass(frozen=True)
class RopeScaling:
    """How the rotary frequencies are stretched for long contexts, in transformers'
    `rope_parameters` words (oracle/rope_scaling.py computes each).  Fields a type does
    not use are None (case/features.py refuses them in a file)."""

    kind: str  # one of ROPE_SCALING_KINDS
    factor: float  # >= 1: how far the context is stretched
    original_max_positions: int | None = None  # the pretraining context (not linear)
    beta_fast: float | None = None  # yarn: ramp edge in rotations (32)
    beta_slow: float | None = None  # yarn: the other edge (1)
    truncate: bool | None = None  # yarn: round the ramp edges to whole dimensions
    mscale: float | None = None  # yarn: numerator coefficient of the attention factor
    mscale_all_dim: float | None = None  # yarn: denominator coefficient (DeepSeek)
    attention_factor: float | None = None  # yarn, longrope: the factor itself, given
    magnitude: str | None = None  # yarn, longrope: one of ROPE_MAGNITUDES
    low_freq_factor: float | None = None  # llama3: low band edge (1)
    high_freq_factor: float | None = None  # llama3: high band edge (4)
    short_factor: tuple[float, ...] | None = None  # longrope: per pair, short contexts
    long_factor: tuple[float, ...] | None = None  # longrope: per pair, past the original


@dataclass(frozen=True)
class Rope:
    """Rotary embeddings on the projected queries and keys (oracle/positional.py)."""

    style: str  # one of ROPE_STYLES: which dimensions pair up
    rotary_dim: int  # per head; the dimensions past it pass unrotated
    base: float  # pair i of position m turns by m * base ** (-2 i / rotary_dim)
    # frequency scaling; out of repr, so the cache keys of unscaled rope cases hold
    scaling: RopeScaling | None = field(default=None, repr=False)
    # positions per axis (M-RoPE's t, h, w sections; 2-D vision grids): multi_axis_rope.py
    multi_axis: MultiAxisRope | None = field(default=None, repr=False)


@dataclass(frozen=True)
class QKNorm:
    """Normalisation of projected queries and keys, before RoPE and the scores."""

    kind: str  # one of QK_NORM_KINDS
    scope: str  # one of QK_NORM_SCOPES: each head's d_k values, or all heads' at once
    eps: float


@dataclass(frozen=True)
class Window:
    """Query i may attend key j when i - left <= j <= i + right (None: unbounded)."""

    left: int | None
    right: int | None


@dataclass(frozen=True)
class Decode:
    """Causal self-attention run as a prefill of `prefill` positions, then `steps`
    single-position steps through the system's own cache."""

    prefill: int
    steps: int


@dataclass(frozen=True)
class Attention:
    """Sizes in the suite's own words; every runner maps them to its own."""

    num_heads: int  # H: query heads
    num_kv_heads: int  # H_kv: key/value heads; < H means grouped-query
    query_features: int  # E_q: last dim of the query input
    key_features: int  # E_k: last dim of the key input
    value_features: int  # E_v: last dim of the value input
    qk_head_dim: int  # d_k: per-head width of projected queries and keys
    v_head_dim: int  # d_v: per-head width of projected values
    output_features: int  # E_o: last dim of the output
    bias: bool  # q, k, v and output projections carry biases
    scale: float | None = field(default=None, repr=False)  # softmax scale; None: 1/sqrt(d_k)
    # rotary embeddings, QK-norm, ALiBi, softcap, sinks (case/features.py); out of repr, so
    # the cache keys of cases without them hold
    rope: Rope | None = field(default=None, repr=False)
    qk_norm: QKNorm | None = field(default=None, repr=False)
    alibi: bool = field(default=False, repr=False)
    softcap: float | None = field(default=None, repr=False)  # c: c * tanh(scores / c)
    sinks: bool = field(default=False, repr=False)  # one learned logit per head
    # today's positions and heads, each read by its own module (case/positions_heads.py)
    layer_schedule: LayerSchedule | None = field(default=None, repr=False)
    temperature: AttentionTemperature | None = field(default=None, repr=False)
    mla: LatentAttention | None = field(default=None, repr=False)
    relative_bias: RelativeBias | None = field(default=None, repr=False)
    output_gate: OutputGate | None = field(default=None, repr=False)


@dataclass(frozen=True)
class Inputs:
    batch: int
    query_len: int  # T
    key_len: int  # S
    self_attention: bool  # one tensor serves as query, key and value
    dtype: str  # one of DTYPES: what the runner computes in
    seed: int  # seeds every array of the case (oracle/canonical.py)
    scale: float = field(default=1.0, repr=False)  # multiplies q, k, v inputs (extreme.py)
    nonfinite: tuple = field(default=(), repr=False)  # extreme.NonFinite entries
    position_offset: int = field(default=0, repr=False)  # first query position
    key_position_offset: int = field(default=0, repr=False)  # first key position


@dataclass(frozen=True)
class Mask:
    """Masks in canonical polarity: True / 1 = may attend."""

    causal: str  # one of CAUSAL; lower_right aligns the diagonal to the last key
    key_padding: tuple[int, ...] | None  # valid key length per batch item (0: fully padded)
    attn_mask_density: float | None  # random mask: probability a position may attend
    attn_mask_matrix: tuple | None  # explicit 0/1 matrix, (T, S) or (B, T, S)
    masked_rows: tuple[int, ...]  # query rows asked to be fully masked (others may be: masks.py)
    window: Window | None = field(default=None, repr=False)  # sliding window, inclusive
    fill: str | None = field(default=None, repr=False)  # one of FILLS, for float masks
    chunk: int | None = field(default=None, repr=False)  # block-diagonal chunks (chunked.py)


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float


@dataclass(frozen=True)
class Expect:
    parameters: int | None  # the analytic formula must give this
    parameters_by_runner: Mapping[str, int]  # a runner's own count, where it differs
    tolerance: Mapping[str, Tolerance]  # overrides of DEFAULT_TOLERANCE by dtype
    behaviours: Mapping[str, Mapping[str, str]]  # edge case -> runner -> behaviour
    # runner -> why it is known to mismatch (with a link): the item is a strict
    # xfail, and passing again fails until the entry is removed
    known_mismatch: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Weights:
    bias_values: str  # "random", or "zeros" as the frameworks' default init leaves them


@dataclass(frozen=True)
class Case:
    id: str
    title: str
    description: str
    source: str
    tags: tuple[str, ...]
    attention: Attention
    inputs: Inputs
    mask: Mask
    expect: Expect
    weights: Weights
    typed: Mapping[str, Any]  # the numbers a user typed in their framework
    path: str = field(default="", compare=False)  # file it came from
    decode: Decode | None = field(default=None, repr=False)  # prefill, then single steps

    def fingerprint(self) -> str:
        """A hash of the case content (not its file), for caches."""
        text = repr(replace(self, path=""))  # scales are out of repr: unset keeps old keys
        extra = "" if self.attention.scale is None else f"|scale={self.attention.scale!r}"
        i = self.inputs  # extreme inputs (extreme.py), only when set
        extra += f"|inputs={i.scale!r},{i.nonfinite!r}" if i.scale != 1 or i.nonfinite else ""
        if self.features:  # rope, windows, fills, decode...: only when used (older keys
            # hold; the tag's text "modern=" is in every such cache key, so it stays)
            a, m = self.attention, self.mask
            extra += (f"|modern={a.rope!r},{a.qk_norm!r},{a.alibi},{a.softcap!r},{a.sinks},"
                      f"{i.position_offset},{i.key_position_offset},{m.window!r},{m.fill!r},"
                      f"{self.decode!r}")
            if a.rope is not None and a.rope.scaling is not None:
                extra += f"|rope_scaling={a.rope.scaling!r}"
            newer = _positions_heads(self)
            if any(x is not None for x in newer):
                extra += f"|positions_heads={newer!r}"
        return hashlib.sha256((text + extra).encode()).hexdigest()[:16]

    @property
    def features(self) -> frozenset[str]:
        """The features this case asks for: rope, rope_scaling, qk_norm, alibi, softcap,
        sinks, position_offset, window, fill, decode, and POSITIONS_HEADS_FEATURES
        (multi_axis_rope, layer_schedule, temperature, mla, relative_bias, output_gate,
        chunk): runners declare theirs."""
        a, i, m = self.attention, self.inputs, self.mask
        named = {"rope": a.rope is not None,
                 "rope_scaling": a.rope is not None and a.rope.scaling is not None,
                 "qk_norm": a.qk_norm is not None,
                 "alibi": a.alibi, "softcap": a.softcap is not None, "sinks": a.sinks,
                 "position_offset": bool(i.position_offset or i.key_position_offset),
                 "window": m.window is not None, "fill": m.fill is not None,
                 "decode": self.decode is not None}
        named.update(zip(POSITIONS_HEADS_FEATURES,
                         (x is not None for x in _positions_heads(self))))
        return frozenset(k for k, v in named.items() if v)

    @property
    def grouped(self) -> bool:
        return self.attention.num_kv_heads < self.attention.num_heads

    @property
    def has_fully_masked_rows(self) -> bool:
        """A query row may attend to no key: derived from the mask (masks.py)."""
        from conformance.case.masks import has_fully_masked_rows

        return has_fully_masked_rows(self)

    @property
    def has_non_causal_mask(self) -> bool:
        """Key padding, an explicit or random mask, or masked rows: what systems with
        their own causal switch take as a mask argument.  Read from the case alone,
        so translating a case allocates nothing."""
        m = self.mask
        return (m.key_padding is not None or m.attn_mask_density is not None
                or m.attn_mask_matrix is not None or bool(m.masked_rows))


# The features of case/positions_heads.py, in _positions_heads' order
POSITIONS_HEADS_FEATURES = ("multi_axis_rope", "layer_schedule", "temperature", "mla",
                            "relative_bias", "output_gate", "chunk")


def _positions_heads(case: Case) -> tuple:
    a = case.attention
    return (None if a.rope is None else a.rope.multi_axis, a.layer_schedule, a.temperature,
            a.mla, a.relative_bias, a.output_gate, case.mask.chunk)


def parameter_count(a: Attention) -> int:
    """The analytic parameter count: projection weights and, with bias, their biases
    (one formula for the loader's budget, typed numbers, the reference and reports)."""
    h, hkv, dk, dv = a.num_heads, a.num_kv_heads, a.qk_head_dim, a.v_head_dim
    count = h * a.query_features * dk + hkv * (a.key_features * dk + a.value_features * dv)
    count += h * dv * a.output_features
    if a.bias:
        count += h * dk + hkv * (dk + dv) + a.output_features
    return count + feature_parameter_count(a)


def feature_parameter_count(a: Attention) -> int:
    """QK-norm scales (and LayerNorm biases) and attention sinks: per head widths d_k for
    `per_head`, every head's d_k values for `all_heads`; one sink logit per head."""
    count = a.num_heads if a.sinks else 0
    if a.relative_bias is not None:  # T5's bucket table, num_buckets x H
        count += a.relative_bias.num_buckets * a.num_heads
    if a.output_gate is not None:  # W_g (H, E_q, d_v) and, with bias, b_g (H, d_v)
        count += a.num_heads * (a.query_features + a.bias) * a.v_head_dim
    if a.qk_norm is not None:
        per = 2 if a.qk_norm.kind == "layer" else 1
        count += per * (2 * a.qk_head_dim if a.qk_norm.scope == "per_head"
                        else (a.num_heads + a.num_kv_heads) * a.qk_head_dim)
    if a.mla is not None:  # MLA's latent projections replace the plain q, k, v ones
        from conformance.case.latent_attention import mla_parameter_count, plain_qkv_count

        count += mla_parameter_count(a) - plain_qkv_count(a)
    return count


def sizes_counts(a: Attention, i: Inputs) -> dict[str, int]:
    """Element counts of a configuration, by arithmetic alone (nothing allocated).

    `weights` is the analytic parameter count (projections and, with bias, their
    biases).  `activations` sums what the float64 reference holds at once: the
    inputs (B*T*E_q + B*S*(E_k + E_v); one tensor for self-attention), the
    projected q, k, v, the scores and the mask (B*H*T*S each), the per-head
    context and the output."""
    h, hkv, dk, dv = a.num_heads, a.num_kv_heads, a.qk_head_dim, a.v_head_dim
    b, t, s = i.batch, i.query_len, i.key_len
    weights = parameter_count(a)
    inputs = b * t * a.query_features
    if not i.self_attention:
        inputs += b * s * (a.key_features + a.value_features)
    projections = b * (h * t * dk + hkv * s * (dk + dv))
    scores = b * h * t * s
    outputs = b * h * t * dv + b * t * a.output_features
    return {"weights": weights, "inputs": inputs, "projections": projections,
            "scores": scores, "outputs": outputs,
            "activations": inputs + projections + 2 * scores + outputs}


def element_counts(case: Case) -> dict[str, int]:
    """Weights and activation element counts of `case`, without allocating them
    (so a GPT-3 sized layer can be counted without running it); see sizes_counts."""
    return sizes_counts(case.attention, case.inputs)


# Default tolerances by dtype, modelled on torch.testing.assert_close and
# widened for half precision, where attention chains several reductions.
DEFAULT_TOLERANCE = {
    "float64": Tolerance(rtol=1e-12, atol=1e-12), "float32": Tolerance(rtol=1.3e-6, atol=1e-5),
    "float16": Tolerance(rtol=1e-3, atol=2e-3), "bfloat16": Tolerance(rtol=1.6e-2, atol=2e-2)}


def tolerance_for(case: Case) -> Tolerance:
    return case.expect.tolerance.get(case.inputs.dtype, DEFAULT_TOLERANCE[case.inputs.dtype])
