"""HuggingFace Qwen2-VL's text attention: `Qwen2VLAttention`, M-RoPE with contiguous sections.

Qwen2VLRotaryEmbedding (modeling_qwen2_vl.py#L88-L143) takes (3, B, T) position ids (t, h,
w), turns every frequency by each row, and keeps, section by section of the config's
`rope_parameters['mrope_section']`, the row i % 3 (recomposition_frequencies, #L142:
`cat([m[i % 3] for i, m in enumerate(freq.split(mrope_section))])`), then the half-split
`rotate_half` (#L147).  The runner builds Qwen2VLTextConfig with the case's sections (a
1-D case: [d/2, 0, 0], its three rows equal) and hands the module's forward the
(cos, sin) the rotary module computes at the case's per-axis positions, as
Qwen2VLTextModel does; with no attention.rope the identity rotation.
Qwen2VLAttention has no head_dim field (head_dim = hidden_size // num_heads, #L491), always
biases q_proj, k_proj and v_proj and never o_proj (#L504-L507): a case without biases
loads zeros into the three (the same arithmetic as none); a case with biases is not
expressible.  Its scale is head_dim**-0.5.
"""
from __future__ import annotations

import numpy as np

from conformance.contract.runner import NotExpressible, harness_limit
from conformance.runners.hf.common import SOURCE, SizeFacts, linear_state
from conformance.runners.hf.declared import self_attention_refusals
from conformance.runners.hf.multi_axis import (
    MROPE_WHY, MroPERotary, mrope_section, multi_axis_limits)
from conformance.runners.hf.rotary import (
    ROTATE_HALF, ConfigRotaryHFRunner, rope_limits, rope_theta)

QWEN2_VL_SOURCE = SOURCE + "qwen2_vl/modeling_qwen2_vl.py"


def zero_qkv_biases(state: dict, weights, names=("q_proj", "k_proj", "v_proj")) -> dict:
    """`state` with zero biases on the q, k and v projections (a module that always has
    them, on a case without biases)."""
    widths = (weights.wq.shape[0] * weights.wq.shape[2], weights.wk.shape[0] * weights.wk.shape[2],
              weights.wv.shape[0] * weights.wv.shape[2])
    return {**state, **{f"{n}.bias": np.zeros(w) for n, w in zip(names, widths)}}


class MRoPEHFRunner(MroPERotary, ConfigRotaryHFRunner):
    """A Qwen-VL text attention built from `<model>TextConfig` with the case's
    mrope_section, its rotation from its own rotary module at (3, B, T) position ids."""

    features = ConfigRotaryHFRunner.features | {"multi_axis_rope"}
    backend = "eager"
    harness_choices = {"attn_implementation": ("eager", "sdpa")}
    config_class = ""  # transformers' <model>TextConfig
    rotary_class = ""  # the model's rotary module
    layout = ""  # the only M-RoPE layout its rotary module computes
    layout_why = ""  # the source that fixes it

    def mrope_limits(self, case) -> str | None:
        r = case.attention.rope
        m = None if r is None else r.multi_axis
        why = self.layout_why if m is None or m.kind == "mrope" else MROPE_WHY
        return multi_axis_limits(case, kind="mrope", layout=self.layout,
                                 module=self.system.rsplit(".", 1)[-1], why=why)

    def config_call(self, case):
        call, cfg = super().config_call(case)
        theta, sections = rope_theta(case), mrope_section(case)
        rope = f"{{'rope_theta': {theta:g}, 'mrope_section': {sections}}}"
        call = call.replace("Config(", f"{self.config_class}(", 1).replace(
            ")", f", rope_parameters={rope})", 1)
        return call, {**cfg, "rope_theta": theta, "mrope_section": sections}

    def build(self, torch, plan):
        import transformers

        _, attention = self._classes()
        rope = {"rope_type": "default", "rope_theta": plan.get("rope_theta", 10000.0),
                "mrope_section": list(plan["mrope_section"])}
        config = getattr(transformers, self.config_class)(
            **{k: plan[k] for k in self.config_keys}, attention_dropout=plan["dropout"],
            rope_parameters=rope, **self.config_kwargs(plan))
        return attention(config, layer_idx=0)

    def rotary(self, torch, config):
        mod, _ = self._classes()
        return getattr(mod, self.rotary_class)(config)


class HFQwen2VL(MRoPEHFRunner):
    name = "hf.qwen2_vl"
    system = "transformers.models.qwen2_vl.modeling_qwen2_vl.Qwen2VLAttention"
    path = "rotary from Qwen2VLRotaryEmbedding at (3, B, T) position ids, or neutralised"
    typed_system = "hf.qwen2_vl"  # Qwen2VLTextConfig's own words
    description = ("`Qwen2VLAttention` (M-RoPE, contiguous mrope_section, grouped-query, "
                   "half-split)")
    rope_source = f"{QWEN2_VL_SOURCE}#L147"
    partial_line = f"{QWEN2_VL_SOURCE}#L118"  # compute_default_rope_parameters: dim = head_dim
    config_class, rotary_class = "Qwen2VLTextConfig", "Qwen2VLRotaryEmbedding"
    layout = "contiguous"
    probe_attention = {"bias": False}  # q, k, v biases always there (zeros), o_proj's never
    layout_why = ("Qwen2VLRotaryEmbedding.recomposition_frequencies splits the pairs into "
                  f"mrope_section's three runs in order, t then h then w ({QWEN2_VL_SOURCE}"
                  "#L142); no setting interleaves them")
    refusals = self_attention_refusals(
        "Qwen2VLAttention", gqa=True, scaling="scaling = head_dim**-0.5",
        head_dim="hidden_size // num_heads (no head_dim field)",
        fixed_bias=(False, "Qwen2VLAttention biases q_proj, k_proj and v_proj and never "
                    f"o_proj (nn.Linear(..., bias=False), {QWEN2_VL_SOURCE}#L507)"))
    config_fields = {"hidden_size": "query_features", "num_attention_heads": "num_heads",
                     "num_key_value_heads": "num_kv_heads"}
    config_keys = ("hidden_size", "num_attention_heads", "num_key_value_heads",
                   "attn_implementation")
    call_template = "Qwen2VLAttention(Config({args}), layer_idx=0)"
    module, model = "qwen2_vl", "Qwen2VL"

    def translate(self, case):
        """The matrix's M-RoPE cases only: their expect.parameters name its own count (the
        module always holds q, k and v biases, zeros here), every other case's pin would be
        another's.  The ledger's probe cases judge no count: probe_translate takes them."""
        r = case.attention.rope
        if r is None or r.multi_axis is None:
            return NotExpressible(harness_limit(
                "hf.qwen2_vl is asked M-RoPE cases only (attention.rope.multi_axis), whose "
                "expect.parameters name its own count: the module always holds q, k and v "
                "biases (zeros here), so every other case's parameter pin would be another's"))
        return super().translate(case)

    def probe_translate(self, case):
        return super().translate(case)

    def model_limits(self, case):
        return rope_limits(case, style="half_split", why_style=f"Qwen2VLAttention: {ROTATE_HALF}",
                           partial=False, why_partial="Qwen2VLRotaryEmbedding's default rope "
                           "rotates the whole head_dim") or self.mrope_limits(case)

    def state(self, case, weights):
        return zero_qkv_biases(linear_state(weights, self.linear_names, False), weights)

    def notes(self, case, module):
        return self.rope_notes(case) + self.multi_axis_notes(case) + [
            "q_proj, k_proj, v_proj biases loaded as zeros (the module always has them); "
            "o_proj has none"]

    sizes = SizeFacts("derived_from_width", f"{QWEN2_VL_SOURCE}#L491", "q_proj.weight",
                      "out x in (nn.Linear)",
                      "q_proj, k_proj, v_proj, o_proj are nn.Linear: (out, in)",
                      "(H + H_kv) d E x 2 + (H + 2 H_kv) d (q, k, v biases)",
                      "probe E=8, H=2, d=4: {n}")

    def size_evidence(self, case, module, shape):
        return (f"Qwen2VLTextConfig(hidden_size=8, num_attention_heads=2): head_dim "
                f"{module.head_dim}, q_proj.weight {shape}; no head-size field")
