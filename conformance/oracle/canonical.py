"""Canonical weights, inputs and masks of a case, generated from its seed.

Every runner loads these same numbers into its own layout, so any difference
in output is a difference in convention, never in initialisation.  Arrays are
drawn in float64 from NumPy's Generator (identical bytes on every machine),
then rounded to the case dtype: the reference computes in float64 *on the
rounded values*, so a float16 runner is judged on its arithmetic, not on the
rounding of its inputs.

Layout (per head, "in x out", DESIGN.md): Wq (H, E_q, d_k), Wk (H_kv, E_k, d_k),
Wv (H_kv, E_v, d_v), Wo (H, d_v, E_o); biases bq (H, d_k), bk (H_kv, d_k),
bv (H_kv, d_v), bo (E_o).  Weights are scaled by 1/sqrt(fan_in) so projections
and scores are O(1) and the softmax is not saturated.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from conformance.case.loader import Case
from conformance.oracle.positional import window_allowed
from conformance.oracle import layer_schedule


def round_to_dtype(x: np.ndarray, dtype: str) -> np.ndarray:
    """Round float64 values to `dtype` and return them as float64 again."""
    if dtype == "float64":
        return np.asarray(x, dtype=np.float64)
    if dtype in ("float32", "float16"):
        with np.errstate(over="ignore"):  # over the dtype's range: inf, as in the dtype
            return np.asarray(x).astype(dtype).astype(np.float64)
    if dtype == "bfloat16":  # NumPy has no bfloat16: round-to-nearest-even on bits
        bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return bits.astype(np.uint32).view(np.float32).astype(np.float64)
    raise ValueError(f"unknown dtype {dtype!r}")


@dataclass(frozen=True)
class CanonicalWeights:
    wq: np.ndarray  # (H, E_q, d_k)
    wk: np.ndarray  # (H_kv, E_k, d_k)
    wv: np.ndarray  # (H_kv, E_v, d_v)
    wo: np.ndarray  # (H, d_v, E_o)
    bq: np.ndarray | None  # (H, d_k); None when the case has no bias
    bk: np.ndarray | None  # (H_kv, d_k)
    bv: np.ndarray | None  # (H_kv, d_v)
    bo: np.ndarray | None  # (E_o,)
    # QK-norm and sinks, only when the case asks (drawn after everything else, so the
    # arrays of other cases never change): QK-norm scales (d_k,) per head or (H, d_k) /
    # (H_kv, d_k) over all heads, LayerNorm biases alike, and one sink logit per head (H,)
    q_norm: np.ndarray | None = None
    k_norm: np.ndarray | None = None
    q_norm_bias: np.ndarray | None = None
    k_norm_bias: np.ndarray | None = None
    sinks: np.ndarray | None = None
    wg: np.ndarray | None = None  # output gate (H, E_q, d_v) (oracle/output_gate.py)
    bg: np.ndarray | None = None  # its bias (H, d_v), with attention.bias
    relative_bias: np.ndarray | None = None  # T5 bucket logits (num_buckets, H)
    # MLA (oracle/latent_attention.py), only with attention.mla: W_dq (E, r_q), its RMSNorm
    # scale (r_q,), W_uq (H, r_q, d_qk); W_dkv (E, r_kv), its scale (r_kv,), W_kr (E, d_r),
    # W_uk (H, r_kv, d_n), W_uv (H, r_kv, d_v); wk and wv are None then (wq too with r_q)
    mla_q_down: np.ndarray | None = None
    mla_q_norm: np.ndarray | None = None
    mla_q_up: np.ndarray | None = None
    mla_kv_down: np.ndarray | None = None
    mla_kv_norm: np.ndarray | None = None
    mla_k_rope: np.ndarray | None = None
    mla_k_up: np.ndarray | None = None
    mla_v_up: np.ndarray | None = None

    NAMES = ("wq", "wk", "wv", "wo", "bq", "bk", "bv", "bo", "q_norm", "k_norm", "q_norm_bias",
             "k_norm_bias", "sinks", "wg", "bg", "relative_bias",
             "mla_q_down", "mla_q_norm", "mla_q_up", "mla_kv_down", "mla_kv_norm",
             "mla_k_rope", "mla_k_up", "mla_v_up")

    def arrays(self) -> dict[str, np.ndarray]:
        """The named arrays that exist (biases only when the case has them)."""
        return {n: getattr(self, n) for n in self.NAMES if getattr(self, n) is not None}

    def count(self) -> int:
        return sum(a.size for a in self.arrays().values())


@dataclass(frozen=True)
class CaseInputs:
    """Inputs and masks; masks in canonical polarity (True = may attend)."""

    query: np.ndarray  # (B, T, E_q)
    key: np.ndarray  # (B, S, E_k); the same object as query for self-attention
    value: np.ndarray  # (B, S, E_v); the same object as query for self-attention
    causal: np.ndarray | None  # (T, S) causal part alone, None when not causal
    key_valid: np.ndarray | None  # (B, S) key padding part alone (True = real key)
    attn_mask: np.ndarray | None  # (B, T, S) explicit/random/masked-rows part alone
    allowed: np.ndarray | None  # (B, T, S) all parts combined; None = no mask at all
    fully_masked: np.ndarray  # (B, T) rows whose every key is masked

    @property
    def non_causal(self) -> np.ndarray | None:
        """Key padding and explicit masks ANDed to (B, T, S), causal left out: what
        systems with their own causal switch (Keras use_causal_mask, ONNX
        is_causal) take as a mask; None when there is none."""
        shape = (self.query.shape[0], self.query.shape[1], self.key.shape[1])
        return combine_masks(
            (None if self.key_valid is None else self.key_valid[:, None, :], self.attn_mask),
            shape)


@dataclass(frozen=True)
class CaseData:
    weights: CanonicalWeights
    inputs: CaseInputs


def combine_masks(parts, shape: tuple[int, ...] | None = None) -> np.ndarray | None:
    """The one mask combination: AND the parts that are not None (True = may
    attend), broadcast to `shape` when given; None when no part is given."""
    parts = [p for p in parts if p is not None]
    if not parts:
        return None
    allowed = np.logical_and.reduce(np.broadcast_arrays(*parts)) if len(parts) > 1 else parts[0]
    return allowed if shape is None else np.broadcast_to(allowed, shape).copy()


def causal_mask(t: int, s: int, alignment: str) -> np.ndarray:
    """(T, S) True where query i may see key j; lower_right aligns the last rows."""
    offset = 0 if alignment == "upper_left" else s - t
    return np.arange(s)[None, :] <= np.arange(t)[:, None] + offset


def _weights(case: Case, rng: np.random.Generator) -> CanonicalWeights:
    a = case.attention
    h, hkv, dk, dv = a.num_heads, a.num_kv_heads, a.qk_head_dim, a.v_head_dim

    def normal(shape, fan_in):
        return rng.standard_normal(shape) / np.sqrt(fan_in)

    wq = normal((h, a.query_features, dk), a.query_features)
    wk = normal((hkv, a.key_features, dk), a.key_features)
    wv = normal((hkv, a.value_features, dv), a.value_features)
    wo = normal((h, dv, a.output_features), h * dv)
    biases = [None] * 4
    if a.bias:
        shapes = [(h, dk), (hkv, dk), (hkv, dv), (a.output_features,)]
        biases = [0.1 * rng.standard_normal(s) for s in shapes]
        if case.weights.bias_values == "zeros":
            biases = [np.zeros(s) for s in shapes]
    return CanonicalWeights(wq, wk, wv, wo, *biases)


def _masks(case: Case, rng: np.random.Generator):
    b, t, s = case.inputs.batch, case.inputs.query_len, case.inputs.key_len
    m = case.mask
    causal = causal_mask(t, s, m.causal) if m.causal != "none" else None
    key_valid = None
    if m.key_padding is not None:
        key_valid = np.arange(s)[None, :] < np.array(m.key_padding)[:, None]
    attn = None
    if m.attn_mask_density is not None:
        attn = rng.random((b, t, s)) < m.attn_mask_density
    elif m.attn_mask_matrix is not None:
        attn = np.broadcast_to(np.array(m.attn_mask_matrix, dtype=bool), (b, t, s)).copy()
    if m.masked_rows:
        attn = np.ones((b, t, s), dtype=bool) if attn is None else attn
        attn[:, list(m.masked_rows), :] = False
    allowed = combine_masks(
        (causal, None if key_valid is None else key_valid[:, None, :], attn), (b, t, s))
    fully = ~allowed.any(-1) if allowed is not None else np.zeros((b, t), dtype=bool)
    return causal, key_valid, attn, allowed, fully


def _generate(case: Case) -> CaseData:
    rng = np.random.default_rng(case.inputs.seed)
    a, i = case.attention, case.inputs
    weights = _weights(case, rng)
    query = rng.standard_normal((i.batch, i.query_len, a.query_features))
    if i.self_attention:
        key = value = query
    else:
        key = rng.standard_normal((i.batch, i.key_len, a.key_features))
        value = rng.standard_normal((i.batch, i.key_len, a.value_features))
    causal, key_valid, attn, allowed, fully = _masks(case, rng)
    if case.features:
        weights = _feature_weights(case, weights, rng)
        allowed, fully = _windowed(case, allowed)
    dt = i.dtype
    weights = CanonicalWeights(**{n: None if v is None else round_to_dtype(v, dt)
                                  for n, v in vars(weights).items()})
    query, key, value = _extreme(case, *(round_to_dtype(x * i.scale, dt) if i.scale != 1
                                         else round_to_dtype(x, dt) for x in (query, key, value)))
    for arr in (query, key, value, *weights.arrays().values()):
        arr.setflags(write=False)  # shared by every runner: nobody may edit it
    return CaseData(weights, CaseInputs(query, key, value, causal, key_valid, attn,
                                        allowed, fully))


def _feature_weights(case: Case, weights: CanonicalWeights,
                    rng: np.random.Generator) -> CanonicalWeights:
    """QK-norm scales near 1 (and LayerNorm biases), sink logits: drawn last."""
    a, extra = case.attention, {}
    if a.qk_norm is not None:
        shapes = ((a.qk_head_dim,), (a.qk_head_dim,)) if a.qk_norm.scope == "per_head" else (
            (a.num_heads, a.qk_head_dim), (a.num_kv_heads, a.qk_head_dim))
        extra["q_norm"], extra["k_norm"] = (1 + 0.1 * rng.standard_normal(s) for s in shapes)
        if a.qk_norm.kind == "layer":
            extra["q_norm_bias"], extra["k_norm_bias"] = (0.1 * rng.standard_normal(s)
                                                          for s in shapes)
    if a.sinks:
        extra["sinks"] = rng.standard_normal(a.num_heads)
    if a.mla is not None:  # its latent projections in place of wk and wv (and wq)
        from conformance.oracle import latent_weights

        extra.update(latent_weights.draw(a, rng))
    if a.output_gate is not None:  # W_g like W_q (1/sqrt(E_q)), b_g like the biases
        extra["wg"] = rng.standard_normal((a.num_heads, a.query_features, a.v_head_dim)) / np.sqrt(
            a.query_features)
        if a.bias:
            extra["bg"] = 0.1 * rng.standard_normal((a.num_heads, a.v_head_dim)) * (
                case.weights.bias_values != "zeros")
    if a.relative_bias is not None:  # logits O(1), so each bucket moves the softmax
        extra["relative_bias"] = rng.standard_normal((a.relative_bias.num_buckets,
                                                      a.num_heads))
    return replace(weights, **extra)


def positions(case: Case) -> tuple[np.ndarray, np.ndarray]:
    """Absolute query and key positions (inputs.position_offset, key_position_offset)."""
    i = case.inputs
    return (i.position_offset + np.arange(i.query_len),
            i.key_position_offset + np.arange(i.key_len))


def _windowed(case: Case, allowed: np.ndarray | None):
    """The mask with mask.window ANDed in, and the rows it leaves empty."""
    b, t, s = case.inputs.batch, case.inputs.query_len, case.inputs.key_len
    w = layer_schedule.resolved(case).mask.window  # a scheduled layer's own window
    if w is not None:
        window = window_allowed(*positions(case), w.left, w.right)
        allowed = combine_masks((allowed, window), (b, t, s))
    if case.mask.chunk is not None:  # Llama 4's blocks of absolute positions (chunked.py)
        from conformance.oracle.chunked import chunk_allowed

        allowed = combine_masks((allowed, chunk_allowed(*positions(case), case.mask.chunk)),
                                (b, t, s))
    fully = ~allowed.any(-1) if allowed is not None else np.zeros((b, t), dtype=bool)
    return allowed, fully


def _extreme(case: Case, query, key, value):
    """inputs.nonfinite placed in the rounded inputs (case/extreme.py); inputs.scale was
    applied before rounding.  Self-attention keeps one tensor."""
    if case.inputs.self_attention:
        key = value = query
    arrays = {"query": query, "key": key, "value": value}
    for entry in case.inputs.nonfinite:
        arrays[entry.tensor][entry.batch, entry.position, entry.feature] = entry.number
    return arrays["query"], arrays["key"], arrays["value"]


_CACHE: dict[str, CaseData] = {}


def case_data(case: Case) -> CaseData:
    """The case's canonical weights and inputs (float64 arrays, dtype-rounded).

    Cached by case content: every runner of a case shares one generation.
    """
    key = case.fingerprint()
    if key not in _CACHE:
        if len(_CACHE) >= 8:
            _CACHE.clear()
        _CACHE[key] = _generate(case)
    return _CACHE[key]
