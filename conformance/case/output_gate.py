"""attention.output_gate: a gate on each head's output, read and validated.

    attention.output_gate: {activation: sigmoid}

Each head's context (its softmax-weighted values, d_v wide) is multiplied element by
element by activation(x_q W_g[h] + b_g[h]), before the output projection sums the heads:
the gated attention of Qwen3-Next (transformers/models/qwen3_next/modeling_qwen3_next.py
Qwen3NextAttention.forward: `attn_output * torch.sigmoid(gate)` then `o_proj`; mlx_lm/
models/qwen3_next.py: `self.o_proj(output * mx.sigmoid(gate))`).  The gate is one value
per element of each head's output (H * d_v of them per token), not one per head: both
systems reshape the gate to (B, T, H * d) and multiply the flattened heads with it.

The canonical gate weights are W_g (H, E_q, d_v) and, with attention.bias, b_g (H, d_v)
(oracle/canonical.py, drawn only when a case asks); how a system stores them (packed with
the queries per head, in halves, or in a projection of their own) is the ledger's
gate_packing axis, not a case field: the canonical weights name no layout.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping

from conformance.case.bounded import short

# the gate's activation: Qwen3-Next's sigmoid (the one every system with the feature uses)
GATE_ACTIVATIONS = ("sigmoid",)
FIELDS = ("activation",)


@dataclass(frozen=True)
class OutputGate:
    """A gate on every element of every head's output, before the output projection."""

    activation: str  # one of GATE_ACTIVATIONS


def read(r, att, inp, mask):
    """`att` with its output_gate read from attention.output_gate; `mask` as given."""
    raw = r.section("attention")["output_gate"]
    at = "attention.output_gate"
    if not isinstance(raw, Mapping):
        raise r.fail(at, "must be a mapping naming the gate's activation, e.g. "
                     f"{{activation: sigmoid}}, got {short(raw)}")
    unknown = sorted(set(raw) - set(FIELDS))
    if unknown:
        raise r.fail(f"{at}.{unknown[0]}", f"unknown field; valid: {list(FIELDS)} (the gate's "
                     "packing is a system's weight layout, not a case field)")
    activation = r.choice(raw, "activation", f"{at}.activation", "sigmoid", GATE_ACTIVATIONS)
    return replace(att, output_gate=OutputGate(activation)), mask
