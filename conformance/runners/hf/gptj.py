"""HuggingFace GPT-J: `GPTJAttention`, interleaved rotary with `rotary_dim`.

GPT-J rotates pairs (2i, 2i + 1) (`rotate_every_two`) of the first
`config.rotary_dim` dimensions of each head; the sin/cos come from
GPTJRotaryEmbedding, a table `create_sinusoidal_positions(max_position_embeddings,
rotary_dim)` with the base fixed at 10000.  q_proj, k_proj, v_proj and out_proj
are nn.Linear(bias=False); head_dim = n_embd // n_head; scale head_dim**-0.5.
GPTJModel builds the causal mask; the module attends to what attention_mask
allows (eager: additive (B, 1, T, S)).
"""
from __future__ import annotations

from conformance.convert.hf import to_gptj
from conformance.runners.hf.common import SOURCE, SizeFacts
from conformance.runners.hf.declared import ConfigBuild, self_attention_refusals
from conformance.runners.hf.rotary import (
    MAX_TABLE, ROTATE_EVERY_TWO, RotaryHFRunner, rope_limits)

GPTJ_SOURCE = SOURCE + "gptj/modeling_gptj.py"


class HFGptj(RotaryHFRunner):
    name = "hf.gptj"
    system = "transformers.models.gptj.modeling_gptj.GPTJAttention"
    path = "rotary from GPTJRotaryEmbedding"
    backend = "eager"
    typed_system = "hf.gptj"
    # the runner builds "eager"; a model built from its config gets "sdpa", which reads a
    # causal switch eager ignores: the ledger measures both (conventions/probes/choices.py)
    harness_choices = {"attn_implementation": ("eager", "sdpa")}
    description = "`GPTJAttention` (interleaved rotary, `rotary_dim` partial)"
    native_style = "interleaved"
    pair_order = "sin_cos"
    needs_rope = True
    rope_source = f"{GPTJ_SOURCE}#L67"
    probe_attention = {"bias": False}

    refusals = self_attention_refusals(
        "GPTJAttention", head_dim="embed_dim // num_attention_heads",
        scaling="scaling = head_dim**-0.5", fixed_bias=(
            False, "GPTJAttention builds q_proj, k_proj, v_proj, out_proj with bias=False; "
            "GPTJConfig has no switch"))

    def model_limits(self, case):
        i = case.inputs
        if i.position_offset + i.query_len > MAX_TABLE:
            return (f"positions up to {i.position_offset + i.query_len}: GPTJRotaryEmbedding "
                    "precomputes a (max_position_embeddings, rotary_dim) table; the runner "
                    f"builds none longer than {MAX_TABLE}")
        return self.rope_model_limits(case) or rope_limits(
            case, style="interleaved", why_style=f"GPTJAttention: {ROTATE_EVERY_TWO}",
            partial=True, base_fixed=True,
            why_partial="create_sinusoidal_positions fixes the base at 10000 (GPTJConfig has "
            "no rope_theta)")

    config_fields = {"n_embd": "query_features", "n_head": "num_heads"}
    call_template = "GPTJAttention(GPTJConfig({args}), layer_idx=0)"
    config_build = ConfigBuild("gptj", "GPTJConfig", "GPTJAttention", dropout="attn_pdrop",
                               residual_dropout="resid_pdrop", optional={
                                   "rotary_dim": None, "max_position_embeddings": 2048})

    def config_call(self, case):
        call, cfg = super().config_call(case)
        i, r = case.inputs, case.attention.rope
        cfg = {**cfg, "rotary_dim": case.attention.qk_head_dim if r is None else r.rotary_dim,
               "max_position_embeddings": max(2048, i.position_offset + i.query_len)}
        return call.replace(")", f", rotary_dim={cfg['rotary_dim']})", 1), cfg

    def rotary(self, torch, config):
        from transformers.models.gptj.modeling_gptj import GPTJRotaryEmbedding

        return GPTJRotaryEmbedding(config)

    def state(self, case, weights):
        return to_gptj(weights)

    def notes(self, case, module):
        return self.rope_notes(case)

    sizes = SizeFacts("derived_from_width", f"{GPTJ_SOURCE}#L114", "q_proj.weight",
                      "out x in (nn.Linear)", "q_proj, k_proj, v_proj, out_proj are "
                      "nn.Linear(bias=False): (out, in)", "4E^2")
