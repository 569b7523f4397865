"""HuggingFace OLMo2: `Olmo2Attention`, RMS QK-norm over the whole projection, rotary.

q_norm = Olmo2RMSNorm(num_attention_heads * head_dim) and k_norm =
Olmo2RMSNorm(num_key_value_heads * head_dim) normalise the full projected
query and key of a position (all heads together) before they are split into
heads and rotated (`rotate_half`, half-split).  Olmo2Config has no head_dim
field (head_dim = hidden_size // num_attention_heads); grouped-query with
`num_key_value_heads`; `attention_bias` on q/k/v/o_proj.
"""
from __future__ import annotations

from conformance.runners.hf.common import SOURCE, SizeFacts
from conformance.runners.hf.declared import self_attention_refusals
from conformance.runners.hf.rope_parameters import RopeParametersScaled
from conformance.runners.hf.rotary import (
    ROTATE_HALF, QKNormRotaryHFRunner, qk_norm_limits, rope_limits)

OLMO2_SOURCE = SOURCE + "olmo2/modeling_olmo2.py"


class HFOlmo2(RopeParametersScaled, QKNormRotaryHFRunner):
    name = "hf.olmo2"
    system = "transformers.models.olmo2.modeling_olmo2.Olmo2Attention"
    path = "rotary from Olmo2RotaryEmbedding, or neutralised"
    backend = "eager"
    typed_system = "hf.olmo2"
    # the runner builds "eager"; a model built from its config gets "sdpa", which reads a
    # causal switch eager ignores: the ledger measures both (conventions/probes/choices.py)
    harness_choices = {"attn_implementation": ("eager", "sdpa")}
    description = "`Olmo2Attention` (RMS QK-norm over the whole projection, half-split rotary)"
    features = QKNormRotaryHFRunner.features | {"qk_norm", "rope_scaling"}
    cos_sin_line = f"{OLMO2_SOURCE}#L111"  # cos = emb.cos() * self.attention_scaling
    rope_source = f"{OLMO2_SOURCE}#L70"
    partial_line = f"{OLMO2_SOURCE}#L100"  # compute_default_rope_parameters: dim = head_dim
    probe_attention = {"qk_norm": {"kind": "rms", "scope": "all_heads"}}

    refusals = self_attention_refusals(
        "Olmo2Attention", gqa=True, scaling="scaling = head_dim**-0.5", width_fixed=(
            "Olmo2Config has no head_dim field: head_dim = hidden_size // num_attention_heads"))

    def model_limits(self, case):
        return qk_norm_limits(case, "all_heads", "Olmo2Attention", (
            "Olmo2Attention builds q_norm = Olmo2RMSNorm(num_attention_heads * head_dim): "
            "the whole projection at once")) or rope_limits(
            case, style="half_split", why_style=f"Olmo2Attention: {ROTATE_HALF}", partial=False,
            why_partial="Olmo2RotaryEmbedding's default rope rotates the whole head_dim"
        ) or self.scaling_limits(case)

    config_fields = {"hidden_size": "query_features", "num_attention_heads": "num_heads",
                     "num_key_value_heads": "num_kv_heads", "attention_bias": "bias"}
    call_template = "Olmo2Attention(Olmo2Config({args}), layer_idx=0)"
    module, model = "olmo2", "Olmo2"
    config_keys = ("hidden_size", "num_attention_heads", "num_key_value_heads",
                   "attention_bias", "attn_implementation")

    def notes(self, case, module):
        return self.rope_notes(case) + self.scaling_notes(case, module) + [
            "q_norm, k_norm: RMSNorm over all heads' values of a "
            f"position ({tuple(module.q_norm.weight.shape)})"]

    sizes = SizeFacts("derived_from_width", f"{OLMO2_SOURCE}#L200", "q_proj.weight",
                      "out x in (nn.Linear)",
                      "q_proj, k_proj, v_proj, o_proj are nn.Linear: (out, in)",
                      "(H + H_kv) d E x 2 + (H + H_kv) d (+ (H + 2 H_kv) d + E biases)",
                      "probe E=8, H=2, d=4, bias: {n}")

    def size_evidence(self, case, module, shape):
        return (f"Olmo2Config(hidden_size=8, num_attention_heads=2): head_dim "
                f"{module.head_dim}, q_proj.weight {shape}; no head-size field")
