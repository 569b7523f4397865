"""HuggingFace GPT-NeoX: `GPTNeoXAttention`, half-split rotary with `rotary_pct`.

The fused `query_key_value` nn.Linear(E, 3E) is viewed per head as [q_h k_h v_h]
(convert.hf.to_gpt_neox); `dense` is the output projection; `attention_bias`
biases both.  The rotation is `rotate_half` over the first
int(head_size * partial_rotary_factor) dimensions (GPTNeoXConfig(rotary_pct=...)
sets rope_parameters['partial_rotary_factor'], `rotary_emb_base` its
rope_theta); cos/sin come from GPTNeoXRotaryEmbedding.  head_size =
hidden_size // num_attention_heads; scale head_size**-0.5.  A scaled rope
(attention.rope.scaling) goes in as the config's `rope_parameters` with its type's keys
beside rope_theta and partial_rotary_factor (rope_parameters.py): GPTNeoXRotaryEmbedding
computes the scaled table for the rotated dims only (modeling_rope_utils.py: dim =
head_dim * partial_rotary_factor) and multiplies cos and sin by the type's attention factor
(#L94), so the factor lands on the rotated dims of q and k; the softmax scale has none.
"""
from __future__ import annotations

from conformance.convert.hf import to_gpt_neox
from conformance.runners.hf.common import SOURCE, SizeFacts
from conformance.runners.hf.declared import Refusals
from conformance.runners.hf.rope_parameters import cos_sin_only, hf_rope
from conformance.runners.hf.rotary import ROTATE_HALF, RotaryHFRunner, rope_limits, rope_theta

NEOX_SOURCE = SOURCE + "gpt_neox/modeling_gpt_neox.py"


class HFGptNeox(RotaryHFRunner):
    name = "hf.gpt_neox"
    system = "transformers.models.gpt_neox.modeling_gpt_neox.GPTNeoXAttention"
    path = "rotary from GPTNeoXRotaryEmbedding"
    backend = "eager"
    typed_system = "hf.gpt_neox"
    # the runner builds "eager"; a model built from its config gets "sdpa", which reads a
    # causal switch eager ignores: the ledger measures both (conventions/probes/choices.py)
    harness_choices = {"attn_implementation": ("eager", "sdpa")}
    description = "`GPTNeoXAttention` (fused per-head qkv, half-split rotary, `rotary_pct`)"
    needs_rope = True
    features = RotaryHFRunner.features | {"rope_scaling"}  # rope_parameters' types
    rope_source = f"{NEOX_SOURCE}#L100"
    cache_argument = "layer_past"  # GPTNeoXAttention.forward(..., layer_past=None, ...)

    refusals = Refusals(
        "GPTNeoXAttention is self-attention only (hidden_states)",
        width_fixed="GPTNeoXAttention sets head_size = hidden_size // num_attention_heads",
        scale_why="a scale other than 1/sqrt(head_size): GPTNeoXAttention.scaling = "
        "head_size**-0.5, not a config field")

    def model_limits(self, case):
        return self.rope_model_limits(case) or rope_limits(
            case, style="half_split", why_style=f"GPTNeoXAttention: {ROTATE_HALF}",
            partial=True) or cos_sin_only(case, "GPTNeoXAttention", f"{NEOX_SOURCE}#L94",
                                          "head_size**-0.5")

    config_fields = {"hidden_size": "query_features", "num_attention_heads": "num_heads",
                     "attention_bias": "bias"}
    call_template = "GPTNeoXAttention(GPTNeoXConfig({args}), layer_idx=0)"

    def config_call(self, case):
        call, cfg = super().config_call(case)
        r = case.attention.rope
        pct = 1.0 if r is None else r.rotary_dim / case.attention.qk_head_dim
        cfg = {**cfg, "rotary_pct": pct, "rotary_emb_base": rope_theta(case)}
        hf = hf_rope(case)
        if hf is None:
            return call.replace(")", f", rotary_pct={pct:g}, rotary_emb_base="
                                f"{cfg['rotary_emb_base']:g})", 1), cfg
        params = {**hf.parameters, "partial_rotary_factor": pct}
        text = hf.text(cfg["rotary_emb_base"])[:-1] + f", 'partial_rotary_factor': {pct:g}}}"
        length = ("" if hf.max_position_embeddings is None else
                  f", max_position_embeddings={hf.max_position_embeddings}")
        return call.replace(")", f"{length}, rope_parameters={text})", 1), {
            **cfg, "rope_scaling": params, "max_position_embeddings": hf.max_position_embeddings}

    def build(self, torch, plan):
        from transformers import GPTNeoXConfig
        from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXAttention

        rope = {"rotary_pct": plan.get("rotary_pct", 1.0),
                "rotary_emb_base": plan.get("rotary_emb_base", 10000.0)}
        if plan.get("rope_scaling"):  # a copy: the config standardises the dict it is given
            rope = {"rope_parameters": {"rope_theta": rope["rotary_emb_base"],
                                        **dict(plan["rope_scaling"])}}
            if plan.get("max_position_embeddings"):
                rope["max_position_embeddings"] = plan["max_position_embeddings"]
        config = GPTNeoXConfig(hidden_size=plan["hidden_size"],
                               num_attention_heads=plan["num_attention_heads"],
                               attention_bias=plan["attention_bias"], **rope,
                               attention_dropout=plan["dropout"],
                               attn_implementation=plan["attn_implementation"])
        return GPTNeoXAttention(config, layer_idx=0)

    def rotary(self, torch, config):
        from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXRotaryEmbedding

        return GPTNeoXRotaryEmbedding(config)

    def state(self, case, weights):
        return to_gpt_neox(weights)

    def notes(self, case, module):
        scaled = []
        if case.attention.rope.scaling is not None:
            from conformance.runners.hf.common import import_torch

            rot = self.rotary(import_torch(), module.config)
            scaled = [f"GPTNeoXRotaryEmbedding: rope_type {rot.rope_type}, attention_scaling "
                      f"{rot.attention_scaling:.6g} on cos and sin of the rotated dims"]
        return self.rope_notes(case) + scaled + [
            f"rotary_ndims = {module.rotary_ndims} of head_size {module.head_size}"]

    sizes = SizeFacts("derived_from_width", f"{NEOX_SOURCE}#L173", "query_key_value.weight",
                      "out x in (nn.Linear), rows per head [q_h; k_h; v_h]",
                      "one nn.Linear(E, 3E) viewed as (B, T, H, 3 head_size) and chunked in "
                      "three", "4E^2 (+ 4E biases)", "probe E=8, H=2, bias: {n}")

    def size_evidence(self, case, module, shape):
        return (f"GPTNeoXConfig(hidden_size=8, num_attention_heads=2): head_size "
                f"{module.head_size}, query_key_value.weight {shape}; no head-size field")
