"""Multi-head latent attention (MLA; DeepSeek-V2, arXiv 2405.04434, section 2.1, eqs. 9-19)
in float64 NumPy, in two forms that must agree.

Materialised (transformers/models/deepseek_v3/modeling_deepseek_v3.py DeepseekV3Attention,
#L435-L482): per head h
    q_h   = x W_q[h]                     or  RMSNorm(x W_dq) W_uq[h]          (B, T, d_n + d_r)
    c     = RMSNorm(x W_dkv)                                                   (B, S, r_kv)
    k_pe  = RoPE(x W_kr)                  ONE head, broadcast to every head    (B, S, d_r)
    k_h   = [c W_uk[h] | k_pe],  v_h = c W_uv[h]
    q_h   = [q_h[:, :d_n] | RoPE(q_h[:, d_n:])]   the rotated slice is the LAST d_r dims
    out   = sum_h softmax(scale q_h k_h^T + mask) v_h W_o[h]
Absorbed (mlx_lm/models/deepseek_v3.py DeepseekV3Attention.__call__ at L == 1, its
MultiLinear embed_q / unembed_out; the paper's "absorb W_uk into W_uq and W_uv into W_o"):
    scores_h = scale ((q_h[:, :d_n] W_uk[h]^T) c^T + q_h[:, d_n:] k_pe^T)
    out      = sum_h (softmax(scores_h) c) W_uv[h] W_o[h]
The latent is never expanded per head; the numbers are the same up to rounding.  x is
the hidden state; a cross-attention case takes c and k_pe from its key input
(case/latent_attention.py).

RoPE is the case's attention.rope on the d_r slice (its pairing, base, scaling and the
magnitude's place: cos_sin multiplies the rotated slice of q and k, softmax_scale multiplies
the scale by its square, oracle/rope_scaling.py).  `rope_first` computes the defect the
ledger's mla_rope_slice probe reads as `first`: the rotated slice taken as the FIRST d_r
dims of the query and the key's rope slice placed first.
"""
from __future__ import annotations

import numpy as np

from conformance.case.latent_attention import NORM_EPS
from conformance.oracle import positional, rope_scaling
from conformance.oracle.canonical import positions

from conformance.oracle.latent_weights import NAMES, draw  # noqa: F401 (re-exported)


def rms_norm(x: np.ndarray, scale: np.ndarray) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + NORM_EPS) * scale


def _rotate(case, x: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """RoPE of the case on (..., L, d_r) vectors at `pos`, with its magnitude on the
    rotated dims where the scaling puts it on cos and sin."""
    r = case.attention.rope
    freq = rope_scaling.inv_freq(r, np.concatenate(positions(case)))
    out = positional.apply_rope(x, pos, r.style, r.rotary_dim, r.base, freq)
    if rope_scaling.placement(r) == "cos_sin":
        out = out * rope_scaling.magnitude(r)
    return out


def _query(case, data) -> np.ndarray:
    """(B, H, T, d_n + d_r) queries before the rotation."""
    w, x = data.weights, data.inputs.query
    if case.attention.mla.q_lora_rank is None:
        return np.einsum("ble,hed->bhld", x, w.wq)
    latent = rms_norm(x @ w.mla_q_down, w.mla_q_norm)
    return np.einsum("blr,hrd->bhld", latent, w.mla_q_up)


def latents(case, data, rope_first: bool = False):
    """(q_nope (B, H, T, d_n), q_pe (B, H, T, d_r) rotated, c (B, S, r_kv), k_pe (B, S, d_r)
    rotated): what both forms share.  `rope_first`: the slice taken first (the defect)."""
    m, w, x = case.attention.mla, data.weights, data.inputs.key  # the latent's input
    q = _query(case, data)
    qpos, kpos = positions(case)
    if rope_first:
        q_pe, q_nope = q[..., :m.qk_rope_head_dim], q[..., m.qk_rope_head_dim:]
    else:
        q_nope, q_pe = q[..., :m.qk_nope_head_dim], q[..., m.qk_nope_head_dim:]
    c = rms_norm(x @ w.mla_kv_down, w.mla_kv_norm)
    return q_nope, _rotate(case, q_pe, qpos), c, _rotate(case, x @ w.mla_k_rope, kpos)


def scale_of(case, scale: float | None = None) -> float:
    """The softmax scale: given, the case's, or 1/sqrt(qk_head_dim); times the scaling's
    magnitude squared where the case puts it on the softmax scale."""
    a = case.attention
    scale = a.scale if scale is None else scale
    scale = 1 / np.sqrt(a.qk_head_dim) if scale is None else scale
    if rope_scaling.placement(a.rope) == "softmax_scale":
        scale = scale * rope_scaling.magnitude(a.rope) ** 2
    return scale


def materialised(case, data, rope_first: bool = False):
    """(q (B, H, T, d_qk), k (B, H, S, d_qk), v (B, H, S, d_v)): every head's key and value
    expanded from the latent, the shared k_pe broadcast to every head."""
    w = data.weights
    q_nope, q_pe, c, k_pe = latents(case, data, rope_first)
    k_nope = np.einsum("bsr,hrd->bhsd", c, w.mla_k_up)
    shared = np.broadcast_to(k_pe[:, None], k_nope.shape[:3] + (k_pe.shape[-1],))
    v = np.einsum("bsr,hrd->bhsd", c, w.mla_v_up)
    if rope_first:
        return (np.concatenate([q_pe, q_nope], -1), np.concatenate([shared, k_nope], -1), v)
    return np.concatenate([q_nope, q_pe], -1), np.concatenate([k_nope, shared], -1), v


def scaled(case, data, scale: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """((B, H, T, S) scaled scores, (B, H, S, d_v) values) of the materialised form: the
    reference's first half for an MLA case (reference.py)."""
    q, k, v = materialised(case, data)
    return np.einsum("bhtd,bhsd->bhts", q, k) * scale_of(case, scale), v


def _softmax(scores: np.ndarray, allowed: np.ndarray | None) -> np.ndarray:
    if allowed is not None:
        scores = np.where(allowed[:, None], scores, -np.inf)
    e = np.exp(scores - scores.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def absorbed(case, data, scale: float | None = None) -> np.ndarray:
    """(B, T, E_o): W_uk folded into the query and W_uv into the output (module docstring);
    no softcap, ALiBi or sinks (an MLA case asks none)."""
    w = data.weights
    q_nope, q_pe, c, k_pe = latents(case, data)
    q_latent = np.einsum("bhtd,hrd->bhtr", q_nope, w.mla_k_up)
    scores = (np.einsum("bhtr,bsr->bhts", q_latent, c)
              + np.einsum("bhtd,bsd->bhts", q_pe, k_pe)) * scale_of(case, scale)
    with np.errstate(invalid="ignore"):
        probs = _softmax(scores, data.inputs.allowed)
    mixed = np.einsum("bhts,bsr->bhtr", probs, c)  # the latent, mixed per head
    heads = np.einsum("bhtr,hrd->bhtd", mixed, w.mla_v_up)
    out = np.einsum("bhtd,hde->bte", heads, w.wo)
    return out if w.bo is None else out + w.bo


def output(case, data, rope_first: bool = False) -> np.ndarray:
    """(B, T, E_o) of the materialised form, or of the defect that rotates the first d_r
    dims (`rope_first`, the reading mla_rope_slice names `first`); no softcap, ALiBi or
    sinks (an MLA case asks none)."""
    q, k, v = materialised(case, data, rope_first)
    scores = np.einsum("bhtd,bhsd->bhts", q, k) * scale_of(case)
    with np.errstate(invalid="ignore"):
        heads = _softmax(scores, data.inputs.allowed) @ v
    w = data.weights
    out = np.einsum("bhtd,hde->bte", heads, w.wo)
    return out if w.bo is None else out + w.bo
