"""HuggingFace DeepSeek-V2: `DeepseekV2Attention`, the same multi-head latent attention as
DeepSeek-V3's module (hf/deepseek_v3.py) with its own rotation.

DeepseekV2Attention (modeling_deepseek_v2.py#L290-L420) has V3's projections, widths, split
(#L384: [nope | rope], the rope slice last), shared k_pe and yarn_apply_mscale (#L281-L286,
#L346), but rotates through complex numbers: DeepseekV2RotaryEmbedding.forward (#L214-L219)
returns freqs_cis = polar(1, position x inv_freq) x attention_scaling, and apply_rotary_emb
(#L259-L272) views q_pe and k_pe as complex pairs (x[2i], x[2i + 1]) in float32 and
multiplies: interleaved pairs always (no rope_interleave), computed in float32 whatever
the module's dtype.  position_embeddings is that complex tensor, which the runner computes
with the model's own rotary module at the case's positions.
"""
from __future__ import annotations

from conformance.runners.hf.common import SOURCE, SizeFacts
from conformance.runners.hf.decoding import refusals
from conformance.runners.hf.deepseek_v3 import MLA_KEYS, HFDeepseekV3
from conformance.runners.hf.rotary import position_ids

DEEPSEEK_V2 = SOURCE + "deepseek_v2/modeling_deepseek_v2.py"


class HFDeepseekV2(HFDeepseekV3):
    name = "hf.deepseek_v2"
    system = "transformers.models.deepseek_v2.modeling_deepseek_v2.DeepseekV2Attention"
    path = "MLA materialised (kv_b_proj), complex rotation from DeepseekV2RotaryEmbedding"
    typed_system = "hf.deepseek_v3"  # DeepseekV2Config takes V3's words
    description = ("`DeepseekV2Attention` (multi-head latent attention as DeepSeek-V3's, the "
                   "rope slice rotated as complex pairs in float32; decoding through "
                   "`DynamicCache`)")
    module, model = "deepseek_v2", "DeepseekV2"
    # its attention function and mask are DeepSeek-V3's (eager_attention_forward, the same
    # builders): hf.deepseek_v3 measures the eager / sdpa choice, this one its rotation
    harness_choices: dict = {}
    rope_source = f"{DEEPSEEK_V2}#L259"
    mla_lines = f"{DEEPSEEK_V2}#L311-L344"  # its projections
    refusals = refusals("DeepseekV2", "yarn_apply_mscale(rope_parameters, qk_head_dim**-0.5)")
    config_keys = ("hidden_size", "num_attention_heads", "num_key_value_heads", "v_head_dim",
                   *MLA_KEYS[:-1], "attn_implementation")
    call_template = "DeepseekV2Attention(DeepseekV2Config({args}), layer_idx=0)"

    def style_limits(self, case):
        if case.attention.rope.style == "interleaved":
            return None
        return ("rope.style=half_split: apply_rotary_emb views q_pe and k_pe as complex pairs "
                f"(x[2i], x[2i + 1]) ({DEEPSEEK_V2}#L259-L272); no setting pairs i with i + d/2")

    def embeddings(self, module, x, case, start: int = 0):
        """freqs_cis, the complex rotation DeepseekV2Model hands every layer, from its rotary
        module at the positions of x's rows after `start` cached ones."""
        import torch

        rot = self.rotary(torch, module.config)
        with torch.no_grad():
            return rot(x, position_ids(torch, case, x.shape[0], x.shape[-2], start))

    sizes = SizeFacts("per_head", f"{DEEPSEEK_V2}#L301-L307", "q_proj.weight",
                      "out x in (nn.Linear)", HFDeepseekV3.sizes.layout_why,
                      HFDeepseekV3.sizes.formula, HFDeepseekV3.sizes.formula_evidence)
