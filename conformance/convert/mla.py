"""Multi-head latent attention weights (attention.mla) in the layouts DeepSeek's attention
modules store them, and back.

The canonical set (oracle/latent_attention.py) holds every factor apart, in x out:
W_dq (E, r_q), its RMSNorm scale, W_uq (H, r_q, d_qk) or a plain W_q (H, E, d_qk); W_dkv
(E, r_kv), W_kr (E, d_r), the kv RMSNorm scale, W_uk (H, r_kv, d_n), W_uv (H, r_kv, d_v);
W_o (H, d_v, E_o).  The modules pack them, and the packing is what a port gets wrong:

- `kv_a_proj_with_mqa.weight` (r_kv + d_r, E): rows [latent | rope key], the ONE rope head
  after the latent (transformers/models/deepseek_v3/modeling_deepseek_v3.py#L387-L391 and
  its torch.split(compressed_kv, [kv_lora_rank, qk_rope_head_dim]) #L446);
- `kv_b_proj.weight` (H (d_n + d_v), r_kv): per head h the rows [k_nope_h (d_n) | v_h
  (d_v)] (#L393-L397, viewed as (B, S, H, d_n + d_v) and split #L414-L417);
- `q_b_proj.weight` (H d_qk, r_q), per head [nope | rope] rows, or `q_proj.weight`
  (H d_qk, E) without a query latent;
- mlx-lm's absorbed form (mlx_lm/models/deepseek_v3.py#L88-L93, its sanitize #L455-L473)
  keeps kv_a_proj_with_mqa and replaces kv_b_proj with `embed_q.weight` (H, r_kv, d_n),
  kv_b_proj's nope rows per head transposed, and `unembed_out.weight` (H, d_v, r_kv).

`to_deepseek_v3(weights, form)` gives the state dict of transformers' DeepseekV3Attention
(`materialised`) or mlx-lm's (`absorbed`); `from_deepseek_v3(state, dims)` the canonical
factors back.  `rope_rows(state, dims, to)` moves a checkpoint between the two pairings
of the rope slice: a rope_interleave=False (rotate_half) checkpoint runs in a system that
rotates interleaved pairs only (mlx-lm's traditional=True, DeepSeek-V2's complex pairs)
once the last qk_rope_head_dim rows of every query head and of the rope key are permuted
as convert/rope.py permutes a Llama head (half-split row i <- interleaved row 2i, row
i + d/2 <- 2i + 1), the nope rows untouched.  Pure NumPy, exact (only reshapes, transposes
and row permutations).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from conformance.convert._core import ConversionError, as_numpy, expect
from conformance.convert.rope import head_permutation
from conformance.oracle.canonical import CanonicalWeights

FORMS = ("materialised", "absorbed")  # transformers' kv_b_proj; mlx-lm's embed_q / unembed_out


@dataclass(frozen=True)
class LatentDims:
    """The widths a state dict does not show unambiguously."""

    num_heads: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


def _c(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x)


def to_deepseek_v3(w: CanonicalWeights, form: str = "materialised") -> dict[str, np.ndarray]:
    """Canonical MLA weights -> DeepseekV3Attention's state dict in `form` (no biases)."""
    if form not in FORMS:
        raise ConversionError(f"unknown MLA form {form!r}; known: {FORMS}")
    if w.mla_kv_down is None:
        raise ConversionError("not an MLA weight set: mla_kv_down is missing")
    h, d_v, e_o = w.wo.shape
    state = {"kv_a_proj_with_mqa.weight": _c(np.concatenate([w.mla_kv_down.T,
                                                             w.mla_k_rope.T])),
             "kv_a_layernorm.weight": _c(w.mla_kv_norm),
             "o_proj.weight": _c(w.wo.reshape(h * d_v, e_o).T)}
    if w.mla_q_down is None:
        state["q_proj.weight"] = _c(w.wq.transpose(0, 2, 1).reshape(-1, w.wq.shape[1]))
    else:
        state.update({"q_a_proj.weight": _c(w.mla_q_down.T),
                      "q_a_layernorm.weight": _c(w.mla_q_norm),
                      "q_b_proj.weight": _c(w.mla_q_up.transpose(0, 2, 1).reshape(
                          -1, w.mla_q_up.shape[1]))})
    if form == "absorbed":
        state["embed_q.weight"] = _c(w.mla_k_up)
        state["unembed_out.weight"] = _c(w.mla_v_up.transpose(0, 2, 1))
    else:  # per head [k_nope_h | v_h] rows
        per_head = np.concatenate([w.mla_k_up, w.mla_v_up], axis=2)  # (H, r_kv, d_n + d_v)
        state["kv_b_proj.weight"] = _c(per_head.transpose(0, 2, 1).reshape(
            -1, per_head.shape[1]))
    return state


def _kv_up(state: Mapping[str, Any], dims: LatentDims, r_kv: int):
    """(W_uk (H, r_kv, d_n), W_uv (H, r_kv, d_v)) from kv_b_proj or embed_q / unembed_out."""
    h, d_n, d_v = dims.num_heads, dims.qk_nope_head_dim, dims.v_head_dim
    if "kv_b_proj.weight" in state:
        kv_b = as_numpy(state["kv_b_proj.weight"])
        expect("kv_b_proj.weight", kv_b, (h * (d_n + d_v), r_kv))
        per_head = kv_b.reshape(h, d_n + d_v, r_kv).transpose(0, 2, 1)
        return _c(per_head[..., :d_n]), _c(per_head[..., d_n:])
    if "embed_q.weight" not in state:
        raise ConversionError("no kv_b_proj.weight (materialised) nor embed_q.weight "
                              "(absorbed) in the state")
    k_up, v_out = as_numpy(state["embed_q.weight"]), as_numpy(state["unembed_out.weight"])
    expect("embed_q.weight", k_up, (h, r_kv, d_n))
    expect("unembed_out.weight", v_out, (h, d_v, r_kv))
    return _c(k_up), _c(v_out.transpose(0, 2, 1))


def from_deepseek_v3(state: Mapping[str, Any], dims: LatentDims) -> CanonicalWeights:
    """DeepseekV3Attention's state dict (either form) -> the canonical MLA factors."""
    kv_a = as_numpy(state["kv_a_proj_with_mqa.weight"])
    r_kv = kv_a.shape[0] - dims.qk_rope_head_dim
    if r_kv < 1:
        raise ConversionError(f"kv_a_proj_with_mqa.weight {kv_a.shape}: no room for a latent "
                              f"beside the rope key ({dims.qk_rope_head_dim} rows)")
    h, d_qk = dims.num_heads, dims.qk_nope_head_dim + dims.qk_rope_head_dim
    o = as_numpy(state["o_proj.weight"])
    expect("o_proj.weight", o, (o.shape[0], h * dims.v_head_dim))
    k_up, v_up = _kv_up(state, dims, r_kv)
    w = CanonicalWeights(None, None, None, _c(o.T.reshape(h, dims.v_head_dim, -1)),
                         None, None, None, None)
    extra: dict[str, Any] = {}
    if "q_proj.weight" in state:
        q = as_numpy(state["q_proj.weight"])
        extra["wq"] = _c(q.reshape(h, d_qk, -1).transpose(0, 2, 1))
    else:
        q_b = as_numpy(state["q_b_proj.weight"])
        extra.update(mla_q_down=_c(as_numpy(state["q_a_proj.weight"]).T),
                     mla_q_norm=_c(as_numpy(state["q_a_layernorm.weight"])),
                     mla_q_up=_c(q_b.reshape(h, d_qk, -1).transpose(0, 2, 1)))
    return replace(w, **extra, mla_kv_down=_c(kv_a[:r_kv].T), mla_k_rope=_c(kv_a[r_kv:].T),
                   mla_kv_norm=_c(as_numpy(state["kv_a_layernorm.weight"])),
                   mla_k_up=k_up, mla_v_up=v_up)


def rope_rows(state: Mapping[str, Any], dims: LatentDims, to: str) -> dict[str, np.ndarray]:
    """`state` with the rope rows of q_proj / q_b_proj (per head) and of
    kv_a_proj_with_mqa (its one rope head) permuted into the pairing `to` ("interleaved"
    from half-split, "half_split" from interleaved)."""
    if to not in ("interleaved", "half_split"):
        raise ConversionError(f"unknown pairing {to!r}; known: interleaved, half_split")
    d_n, d_r = dims.qk_nope_head_dim, dims.qk_rope_head_dim
    p = head_permutation(d_r)  # half-split row j <- interleaved row p[j]
    order = np.argsort(p) if to == "interleaved" else p
    out = {k: as_numpy(v) for k, v in state.items()}
    q_name = "q_proj.weight" if "q_proj.weight" in out else "q_b_proj.weight"
    q = out[q_name].reshape(dims.num_heads, d_n + d_r, -1)
    out[q_name] = _c(np.concatenate([q[:, :d_n], q[:, d_n:][:, order]], axis=1).reshape(
        dims.num_heads * (d_n + d_r), -1))
    kv_a = out["kv_a_proj_with_mqa.weight"]
    r_kv = kv_a.shape[0] - d_r
    out["kv_a_proj_with_mqa.weight"] = _c(np.concatenate([kv_a[:r_kv], kv_a[r_kv:][order]]))
    return out
