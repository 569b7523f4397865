"""The output gate's weights (attention.output_gate) in the layouts systems store them.

The canonical set holds W_q (H, E_q, d_k) and the gate W_g (H, E_q, d_v) apart (biases
b_q (H, d_k), b_g (H, d_v)).  A system that computes both from one projection packs them
into its rows, and the packing is what a port gets wrong:

- per_head: q_proj rows [q_0 | g_0 | q_1 | g_1 | ...], each head's query rows followed by
  its gate rows: Qwen3-Next (transformers/models/qwen3_next/modeling_qwen3_next.py
  Qwen3NextAttention.forward #L270-L273 views q_proj's output as (B, T, H, 2 d) and chunks
  the last axis in two; mlx_lm/models/qwen3_next.py reshapes to (B, L, H, -1) and splits);
- halves: rows [q_0 | q_1 | ... | g_0 | g_1 | ...], every query head then every gate head
  (what chunking the whole projection in two gives);
- separate: q_proj holds the queries alone and gate_proj the gate.

`to_qwen3_next` / `from_qwen3_next` are Qwen3NextAttention's state dict: the Llama keys,
q_proj packed as asked, and RMSNorm q_norm / k_norm (head size,) where the weights hold
them.  transformers' norm multiplies by (1 + weight) (Qwen3NextRMSNorm.forward, weight
initialised to zeros), MLX's nn.RMSNorm by the weight itself (mlx_lm's sanitize adds 1.0
to a checkpoint's norms):
`norm="offset"` stores canonical - 1, `norm="scale"` the canonical scale.  For scales in
[0.5, 2] (the canonical 1 + 0.1 N) the offset and its inverse are exact (Sterbenz), so the
round trip stays bit-identical.  Pure NumPy.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from conformance.oracle.canonical import CanonicalWeights
from conformance.convert._core import ConversionError, as_numpy, dims_of, expect
from conformance.convert.hf import from_llama, from_qk_norm, to_llama, to_qk_norm

GATE_PACKINGS = ("per_head", "halves", "separate")
NORMS = ("offset", "scale")
QWEN3_NEXT = "Qwen3NextAttention"


def _check(packing: str) -> None:
    if packing not in GATE_PACKINGS:
        raise ConversionError(f"unknown gate packing {packing!r}; known: {GATE_PACKINGS}")


def pack(q: np.ndarray, g: np.ndarray, packing: str) -> tuple[np.ndarray, ...]:
    """Per-head row blocks q (H, d_k, ...) and g (H, d_v, ...) -> the q_proj rows
    (H (d_k + d_v), ...) packed per_head or in halves, or (q rows, gate rows) separate."""
    _check(packing)
    rest = q.shape[2:]
    if packing == "separate":
        return (np.ascontiguousarray(q.reshape(-1, *rest)),
                np.ascontiguousarray(g.reshape(-1, *rest)))
    if packing == "halves":
        return (np.ascontiguousarray(np.concatenate([q.reshape(-1, *rest),
                                                     g.reshape(-1, *rest)])),)
    return (np.ascontiguousarray(np.concatenate([q, g], axis=1).reshape(-1, *rest)),)


def unpack(rows: tuple[np.ndarray, ...], num_heads: int, d_k: int,
           packing: str) -> tuple[np.ndarray, np.ndarray]:
    """The inverse of `pack`: q_proj rows (and gate rows, separate) -> q (H, d_k, ...),
    g (H, d_v, ...)."""
    _check(packing)
    h = num_heads
    if packing == "separate":
        q, g = rows
        return q.reshape(h, d_k, *q.shape[1:]), g.reshape(h, -1, *g.shape[1:])
    (m,) = rows
    rest = m.shape[1:]
    if m.shape[0] % h or m.shape[0] // h <= d_k:
        raise ConversionError(f"q_proj: {m.shape[0]} rows do not hold {h} heads of {d_k} query "
                              "rows and a gate")
    if packing == "halves":
        return (m[:h * d_k].reshape(h, d_k, *rest), m[h * d_k:].reshape(h, -1, *rest))
    per = m.reshape(h, -1, *rest)
    return per[:, :d_k], per[:, d_k:]


def to_qwen3_next(weights: CanonicalWeights, packing: str = "per_head",
                  norm: str = "offset") -> dict[str, np.ndarray]:
    """Canonical -> Qwen3NextAttention's state: q_proj packed with the gate (`packing`),
    k/v/o_proj, q_norm and k_norm (`norm`: transformers' offset, MLX's scale)."""
    if weights.wg is None:
        raise ConversionError(f"{QWEN3_NEXT}: the weights hold no gate W_g (a case without "
                              "attention.output_gate)")
    if norm not in NORMS:
        raise ConversionError(f"unknown norm {norm!r}; known: {NORMS}")
    state = to_qk_norm(weights) if weights.q_norm is not None else to_llama(weights)
    names = ("q_proj.weight", "gate_proj.weight")
    rows = pack(weights.wq.transpose(0, 2, 1), weights.wg.transpose(0, 2, 1), packing)
    state.update(zip(names, rows))
    if weights.bq is not None:
        if weights.bg is None:
            raise ConversionError(f"{QWEN3_NEXT}: q_proj has a bias, the gate has none (bg)")
        state.update(zip(("q_proj.bias", "gate_proj.bias"), pack(weights.bq, weights.bg,
                                                                 packing)))
    if norm == "offset":  # Qwen3NextRMSNorm: output * (1.0 + weight)
        for key in ("q_norm.weight", "k_norm.weight"):
            state[key] = state[key] - 1.0
    return state


def from_qwen3_next(state: Mapping[str, Any], num_heads: int, num_kv_heads: int | None = None,
                    packing: str = "per_head", norm: str = "offset") -> CanonicalWeights:
    """Qwen3NextAttention's state (q_proj packed as `packing`) -> canonical with W_g."""
    _check(packing)
    arrs = {k: as_numpy(v) for k, v in state.items()}
    kv = num_heads if num_kv_heads is None else num_kv_heads
    v = arrs.get("v_proj.weight")
    if v is None or v.ndim != 2 or v.shape[0] % kv:
        raise ConversionError(f"{QWEN3_NEXT}: v_proj.weight (H_kv * head size, in) is needed "
                              "to read the head size")
    d = v.shape[0] // kv
    gate_keys = ("q_proj.weight", "gate_proj.weight")[:1 + (packing == "separate")]
    q, g = unpack(tuple(arrs.pop(k) for k in gate_keys), num_heads, d, packing)
    expect("gate rows", g, (num_heads, d, q.shape[2]))
    arrs["q_proj.weight"] = q.reshape(-1, q.shape[2])
    bg = None
    if "q_proj.bias" in arrs:
        bias_keys = ("q_proj.bias", "gate_proj.bias")[:1 + (packing == "separate")]
        bq, bg = unpack(tuple(arrs.pop(k) for k in bias_keys), num_heads, d, packing)
        arrs["q_proj.bias"] = bq.reshape(-1)
    if norm == "offset":
        for key in ("q_norm.weight", "k_norm.weight"):
            if key in arrs:
                arrs[key] = arrs[key] + 1.0
    w = (from_qk_norm if "q_norm.weight" in arrs else from_llama)(arrs, num_heads, num_kv_heads)
    dims_of(w)
    return replace(w, wg=np.ascontiguousarray(g.transpose(0, 2, 1)), bg=bg)
