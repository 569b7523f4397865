"""The output gate in float64 (attention.output_gate; case/output_gate.py).

Gated attention (Qiu et al. 2025, "Gated Attention for Large Language Models",
arXiv:2505.06708, the elementwise SDPA-output gate G1) as Qwen3-Next computes it
(transformers/models/qwen3_next/modeling_qwen3_next.py Qwen3NextAttention.forward #L270-L303):

    gate_h = sigmoid(x_q W_g[h] + b_g[h])          (B, T, d_v) per head h
    head_h <- head_h * gate_h                     element by element
    out    = sum_h head_h W_o[h] + b_o             the output projection after the gate

The gate is read from the query input (the layer's hidden states), one value per element of
each head's context, and multiplies the context before the heads are projected and summed.
`gated` is the oracle's; `gate_values` is the gate alone, for probes that read a place.
"""
from __future__ import annotations

import numpy as np

from conformance.oracle.canonical import CaseData


def sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)) without overflow for large |x|."""
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def gate_values(data: CaseData) -> np.ndarray:
    """(B, H, T, d_v): sigmoid(x_q W_g[h] + b_g[h]) for every head, from the query input."""
    w = data.weights
    pre = np.einsum("bte,hed->bhtd", data.inputs.query, w.wg)
    if w.bg is not None:
        pre = pre + w.bg[None, :, None, :]
    return sigmoid(pre)


def gated(heads: np.ndarray, data: CaseData) -> np.ndarray:
    """(B, H, T, d_v) head contexts times their gate; unchanged when the case has no gate
    (its canonical weights hold no W_g)."""
    if data.weights.wg is None:
        return heads
    return heads * gate_values(data)
