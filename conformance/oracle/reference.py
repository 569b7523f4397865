"""The oracle: multi-head attention in float64 NumPy, written for clarity.

Semantics (DESIGN.md): for each query head h, with kv head g = h // (H / H_kv),
    head_h = softmax(scale * (x_q Wq[h] + bq[h]) (x_k Wk[g] + bk[g])^T + mask)
             (x_v Wv[g] + bv[g])
    out    = sum_h head_h Wo[h] + bo,
    scale  = attention.scale when the case sets it, else 1 / sqrt(d_k).
A query row whose every key is masked has no defined softmax: the reference
returns NaN there (weights and output) and the comparator judges that row by
the behaviour the case declares instead of by numbers.

Extreme inputs (case/extreme.py) are computed in IEEE float64 as they are: a
saturated softmax is an ordinary number; a NaN or inf input spreads through
the arithmetic.  A NaN in key position s of item b makes every score of item b
that attends to s NaN, so those query rows are undefined (a masked score is
replaced by -inf first, so a masked NaN key spreads nowhere); a NaN in value
position s reaches every row of item b (0 * NaN is NaN); a NaN in query row t
makes row t undefined.  `Expected.undefined` marks the output elements the
oracle leaves non-finite (fully masked rows apart): the comparator judges them
by the case's declared nonfinite_input behaviour, not by numbers.

The attention features (case/features.py; each from its paper in positional.py), in
this order: QK-norm on the projected q and k (before the kv heads are repeated),
RoPE at the absolute positions (its frequency scaling and magnitude from
oracle/rope_scaling.py: on the rotated dims, or squared on the softmax scale), the
scaled scores, softcap, the ALiBi bias, the mask (mask.window ANDed in by
canonical.py), and the softmax with the sink logits in its denominator.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from conformance.case.loader import Case
from conformance.case.model import parameter_count
from conformance.oracle import output_gate, positional, relative_bias, rope_scaling
from conformance.oracle.canonical import CaseData, case_data, positions
from conformance.oracle import layer_schedule
from conformance.oracle import latent_attention


@dataclass(frozen=True)
class Expected:
    output: np.ndarray  # (B, T, E_o), NaN on fully masked rows
    weights: np.ndarray  # (B, H, T, S) per-head softmax, NaN on fully masked rows
    fully_masked: np.ndarray  # (B, T) bool
    # What each fully-masked-row hypothesis would give there (compare/agreement.py):
    output_if_zeros: np.ndarray  # the row's attention weights are all 0
    output_if_uniform: np.ndarray  # the row attends uniformly to every key
    # (B, T, E_o) output elements the oracle leaves NaN/inf, fully masked rows apart
    undefined: np.ndarray | None = None


def project(x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    """(B, L, E) x (H, E, d) -> (B, H, L, d)."""
    y = np.einsum("ble,hed->bhld", x, w)
    return y if b is None else y + b[None, :, None, :]


def projected_heads(case: Case, data: CaseData) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The per-head (q, k, v) the ledger's own score simulations start from (masks.py,
    decode_masks.py, probing.py, cache_probes.py): the plain projections of the canonical
    weights, or for an MLA case its materialised heads (rotated, every head's key)."""
    if case.attention.mla is not None:
        return latent_attention.materialised(case, data)
    w, x = data.weights, data.inputs
    return (project(x.query, w.wq, w.bq), project(x.key, w.wk, w.bk),
            project(x.value, w.wv, w.bv))


def _softmax(scores: np.ndarray, allowed: np.ndarray | None) -> np.ndarray:
    if allowed is not None:
        scores = np.where(allowed[:, None], scores, -np.inf)
    peak = scores.max(-1, keepdims=True)
    with np.errstate(invalid="ignore"):  # -inf - -inf on fully masked rows -> NaN
        e = np.exp(scores - peak)
        return e / e.sum(-1, keepdims=True)


def _combine(heads: np.ndarray, data: CaseData) -> np.ndarray:
    w = data.weights
    heads = output_gate.gated(heads, data)  # each head's output gate, before W_o
    out = np.einsum("bhtd,hde->bte", heads, w.wo)
    return out if w.bo is None else out + w.bo


def attention(case: Case, data: CaseData | None = None, scale: float | None = None) -> Expected:
    """`scale` overrides the case's scale (`case.attention.scale`, itself None for the
    default 1/sqrt(d_k)); the convention probes try other scales.  The default divides
    by sqrt(d_k), as it always has (the committed reports stay bit for bit)."""
    data = data or case_data(case)
    with np.errstate(invalid="ignore", over="ignore"):  # extreme inputs: IEEE as it comes
        return _attention(case, data, scale)


def scaled_scores(case: Case, data: CaseData | None = None,
                  scale: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """((B, H, T, S) scores after QK-norm, RoPE and the scale, before softcap, ALiBi and the
    mask; (B, H, S, d_v) values, each kv head repeated for its group of query heads): the
    oracle's own first half, for probes that read a system's scores (the ONNX Attention
    op's qk_matmul_output stages)."""
    data = data or case_data(case)
    with np.errstate(invalid="ignore", over="ignore"):
        return _scaled(case, data, scale)


def _scaled(case: Case, data: CaseData, scale: float | None) -> tuple[np.ndarray, np.ndarray]:
    case = layer_schedule.resolved(case)  # a scheduled layer: its own rope and window
    if case.attention.mla is not None:  # its latent projections (latent_attention.py)
        return latent_attention.scaled(case, data, scale)
    w, x = data.weights, data.inputs
    group = case.attention.num_heads // case.attention.num_kv_heads
    q, k = project(x.query, w.wq, w.bq), project(x.key, w.wk, w.bk)
    if case.features:
        q, k = _positional_qk(case, data, q, k)
    k = np.repeat(k, group, axis=1)
    v = np.repeat(project(x.value, w.wv, w.bv), group, axis=1)
    scores = np.einsum("bhtd,bhsd->bhts", q, k)
    scale = case.attention.scale if scale is None else scale
    scores = scores / np.sqrt(case.attention.qk_head_dim) if scale is None else scores * scale
    if rope_scaling.placement(case.attention.rope) == "softmax_scale":
        scores = scores * rope_scaling.magnitude(case.attention.rope) ** 2
    return scores, v


def _attention(case: Case, data: CaseData, scale: float | None) -> Expected:
    w, x = data.weights, data.inputs
    scores, v = _scaled(case, data, scale)
    if case.features:
        scores = _biased(case, scores, data)
    probs = (_softmax(scores, x.allowed) if w.sinks is None
             else positional.softmax_with_sinks(scores, x.allowed, w.sinks))
    out = _combine(probs @ v, data)
    fully = x.fully_masked
    # Hypotheses for fully masked rows: zero weights, or uniform over all keys.
    zero_heads = np.where(fully[:, None, :, None], 0.0, np.nan_to_num(probs)) @ v
    uniform = np.where(fully[:, None, :, None], 1.0 / v.shape[2], np.nan_to_num(probs))
    undefined = ~np.isfinite(out) & ~fully[:, :, None]
    return Expected(out, probs, fully, _combine(zero_heads, data), _combine(uniform @ v, data),
                    undefined)


def _positional_qk(case: Case, data: CaseData, q: np.ndarray, k: np.ndarray):
    """QK-norm, then RoPE, on (B, H, L, d) queries and (B, H_kv, S, d) keys."""
    a, w = case.attention, data.weights
    if a.qk_norm is not None:
        n = a.qk_norm
        q = positional.qk_norm(q, n.kind, n.scope, w.q_norm, w.q_norm_bias, n.eps)
        k = positional.qk_norm(k, n.kind, n.scope, w.k_norm, w.k_norm_bias, n.eps)
    if a.rope is not None and a.rope.multi_axis is not None:  # M-RoPE, 2-D grids
        from conformance.oracle import multi_axis_rope

        q, k = multi_axis_rope.rotated(case, q, k)
    elif a.rope is not None:
        qpos, kpos = positions(case)
        r = a.rope
        freq = rope_scaling.inv_freq(r, np.concatenate([qpos, kpos]))
        q = positional.apply_rope(q, qpos, r.style, r.rotary_dim, r.base, freq)
        k = positional.apply_rope(k, kpos, r.style, r.rotary_dim, r.base, freq)
        if rope_scaling.placement(r) == "cos_sin":  # cos and sin times the factor
            q, k = _rotated_times(q, r), _rotated_times(k, r)
    if a.temperature is not None:  # Llama 4's query temperature (oracle/chunked.py)
        from conformance.oracle.chunked import tempered

        q = tempered(q, positions(case)[0], a.temperature)
    return q, k


def _rotated_times(x: np.ndarray, rope) -> np.ndarray:
    """`x` with its rotated dims (the first rotary_dim of each head, in either pairing)
    multiplied by the scaling's magnitude, as cos and sin times it give."""
    out = np.array(x, copy=True)
    out[..., :rope.rotary_dim] *= rope_scaling.magnitude(rope)
    return out


def _biased(case: Case, scores: np.ndarray, data: CaseData) -> np.ndarray:
    """Softcap, then the ALiBi bias and T5's relative bias, on the scaled (B, H, T, S)
    scores."""
    a = case.attention
    if a.softcap is not None:
        scores = positional.softcap(scores, a.softcap)
    if a.alibi:
        scores = scores + positional.alibi_bias(a.num_heads, *positions(case))[None]
    return relative_bias.added(case, data, scores)


def formula_parameters(case: Case) -> int:
    """Analytic count: the projections' weights and, with bias, their biases."""
    return parameter_count(case.attention)
