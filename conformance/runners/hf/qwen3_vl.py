"""HuggingFace Qwen3-VL's text attention: `Qwen3VLTextAttention`, M-RoPE interleaved at
stride 3, RMS QK-norm per head.

Qwen3VLTextRotaryEmbedding (modeling_qwen3_vl.py#L358-L419) takes (3, B, T) position ids,
turns every frequency by each row, and starts from the t row's table, overwriting pair i
with the h row's where i % 3 == 1 and i < 3 mrope_section[1], with the w row's where
i % 3 == 2 and i < 3 mrope_section[2] (recomposition_frequencies, #L410-L419:
`slice(offset, length, 3)`), then the half-split `rotate_half`.  No setting lays the
sections out contiguously (the config's `mrope_interleaved` is only exempted from rope
validation, configuration_qwen3_vl.py#L83).  q_norm and k_norm are RMSNorm(head_dim)
before the rotation (#L496-L499), as Qwen3's; `attention_bias` biases all four
projections; `head_dim` is a config field.  The runner hands the module's forward the
(cos, sin) of the rotary module at the case's per-axis positions, as Qwen3VLTextModel
does; with no attention.rope the identity rotation.
"""
from __future__ import annotations

from conformance.runners.hf.common import SOURCE, SizeFacts
from conformance.runners.hf.declared import self_attention_refusals
from conformance.runners.hf.qwen2_vl import MRoPEHFRunner
from conformance.runners.hf.rotary import ROTATE_HALF, qk_norm_limits, rope_limits

QWEN3_VL_SOURCE = SOURCE + "qwen3_vl/modeling_qwen3_vl.py"


class HFQwen3VL(MRoPEHFRunner):
    name = "hf.qwen3_vl"
    system = "transformers.models.qwen3_vl.modeling_qwen3_vl.Qwen3VLTextAttention"
    path = "rotary from Qwen3VLTextRotaryEmbedding at (3, B, T) position ids, or neutralised"
    typed_system = "hf.qwen3"  # Qwen3VLTextConfig takes Qwen3Config's words
    description = ("`Qwen3VLTextAttention` (M-RoPE interleaved at stride 3, RMS QK-norm per "
                   "head, grouped-query, half-split)")
    features = MRoPEHFRunner.features | {"qk_norm"}
    rope_source = f"{QWEN3_VL_SOURCE}#L418"
    partial_line = f"{QWEN3_VL_SOURCE}#L390"  # compute_default_rope_parameters: dim = head_dim
    probe_attention = {"qk_norm": {"kind": "rms", "scope": "per_head"}}
    config_class, rotary_class = "Qwen3VLTextConfig", "Qwen3VLTextRotaryEmbedding"
    layout = "interleaved"
    layout_why = ("Qwen3VLTextRotaryEmbedding.recomposition_frequencies lays h on pairs "
                  "i % 3 == 1 and w on pairs i % 3 == 2 below 3 x their sections, t on the "
                  f"rest ({QWEN3_VL_SOURCE}#L414-L418); no setting lays them contiguously")
    refusals = self_attention_refusals("Qwen3VLTextAttention", gqa=True,
                                       scaling="scaling = head_dim**-0.5")
    call_template = "Qwen3VLTextAttention(Config({args}), layer_idx=0)"
    module, model = "qwen3_vl", "Qwen3VLText"

    def model_limits(self, case):
        return qk_norm_limits(case, "per_head", "Qwen3VLTextAttention", (
            "Qwen3VLTextAttention builds q_norm = Qwen3VLTextRMSNorm(self.head_dim): each "
            "head apart")) or rope_limits(
            case, style="half_split", why_style=f"Qwen3VLTextAttention: {ROTATE_HALF}",
            partial=False, why_partial="Qwen3VLTextRotaryEmbedding's default rope rotates the "
            "whole head_dim") or self.mrope_limits(case)

    def config_call(self, case):
        call, cfg = super().config_call(case)
        eps = 1e-6 if case.attention.qk_norm is None else case.attention.qk_norm.eps
        return call.replace(")", f", rms_norm_eps={eps:g})", 1), {**cfg, "rms_norm_eps": eps}

    def config_kwargs(self, plan):
        return {"rms_norm_eps": plan.get("rms_norm_eps", 1e-6)}

    def state(self, case, weights):
        from conformance.convert.hf import to_qk_norm

        return to_qk_norm(weights)

    def notes(self, case, module):
        return self.rope_notes(case) + self.multi_axis_notes(case) + [
            "q_norm, k_norm: RMSNorm over each head's head_dim values, eps "
            f"{module.q_norm.variance_epsilon:g}"]

    sizes = SizeFacts("per_head", f"{QWEN3_VL_SOURCE}#L478", "q_proj.weight",
                      "out x in (nn.Linear)",
                      "q_proj, k_proj, v_proj, o_proj are nn.Linear: (out, in)",
                      "(H + H_kv) d E x 2 + 2 d (+ (H + 2 H_kv) d + E biases)",
                      "probe E=8, H=2, d=4, bias: {n}")
