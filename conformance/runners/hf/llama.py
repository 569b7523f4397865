"""HuggingFace Llama: `LlamaAttention`, with the rotary embedding of the case or neutralised.

LlamaConfig's `head_dim` is the per-head size (default hidden_size //
num_attention_heads, any value allowed); `num_key_value_heads` < heads gives
grouped-query attention; `attention_bias` puts a bias on q_proj, k_proj,
v_proj AND o_proj (exactly the suite's `bias`).  The rotary embedding is
applied inside forward to q and k from `position_embeddings=(cos, sin)`: with
attention.rope the runner computes them as LlamaModel does
(LlamaRotaryEmbedding(config)(x, position_ids), rope_theta = rope.base,
position_ids = position_offset + t); without it, it passes cos = 1, sin = 0 (the
identity rotation), so the module computes plain multi-head attention; the row
says so.  A scaled rope (attention.rope.scaling) goes in as the config's
`rope_parameters` with its type's keys (rope_parameters.py, transformers'
modeling_rope_utils.py): LlamaRotaryEmbedding computes the scaled frequencies, at the
case's position_ids, and multiplies cos and sin by the type's attention factor; the
factor has no place on the softmax scale (LlamaAttention.scaling = head_dim**-0.5), so a
case asking for it there is not expressible.  `rotate_half` pairs (i, i + d/2):
interleaved pairs are not expressible, and the default rope type rotates the whole head (a
`partial_rotary_factor` in rope_parameters is accepted and ignored: rope_partial
reads `ignored`, #L102), so a partial-rotary case is not expressible.  LlamaModel always builds a
causal mask; the module itself attends to what attention_mask allows (eager:
the additive (B, 1, T, S) mask; None = every key).  A decode case runs through
DynamicCache with the masks of create_causal_mask (decoding.py).
"""
from __future__ import annotations

from conformance.runners.hf.common import SOURCE, SizeFacts
from conformance.runners.hf.declared import Refusals
from conformance.runners.hf.decoding import DecodingHFRunner
from conformance.runners.hf.rope_parameters import cos_sin_only, hf_rope
from conformance.runners.hf.rotary import ROTATE_HALF, rope_limits

LLAMA_SOURCE = SOURCE + "llama/modeling_llama.py"


class HFLlama(DecodingHFRunner):
    name = "hf.llama"
    system = "transformers.models.llama.modeling_llama.LlamaAttention"
    path = "rotary from LlamaRotaryEmbedding, or neutralised (cos=1, sin=0)"
    backend = "eager"
    typed_system = "hf.llama"
    # the runner builds "eager"; a model built from its config gets "sdpa", which reads a
    # causal switch eager ignores: the ledger measures both (conventions/probes/choices.py)
    harness_choices = {"attn_implementation": ("eager", "sdpa")}
    description = ("`LlamaAttention` (`head_dim`, grouped-query, half-split rotary or "
                   "neutralised, decoding through `DynamicCache`)")

    refusals = Refusals("LlamaAttention is self-attention only (hidden_states)", gqa=True,
                        scale_why="a scale other than 1/sqrt(head_dim): LlamaAttention.scaling "
                        "= head_dim**-0.5, not a config field")
    features = DecodingHFRunner.features | {"rope_scaling"}  # rope_parameters' types
    rope_source = f"{LLAMA_SOURCE}#L119"
    partial_line = f"{LLAMA_SOURCE}#L102"  # compute_default_rope_parameters: dim = head_dim

    def model_limits(self, case):
        return rope_limits(case, style="half_split", why_style=f"LlamaAttention: {ROTATE_HALF}",
                           partial=False, why_partial=(
                               "LlamaRotaryEmbedding.compute_default_rope_parameters takes dim = "
                               "head_dim (rope_parameters['partial_rotary_factor'] is ignored)")
                           ) or cos_sin_only(case, "LlamaAttention", f"{LLAMA_SOURCE}#L113")

    def config_call(self, case):
        """The config call; a scaled rope's rope_parameters and max_position_embeddings."""
        call, cfg = super().config_call(case)
        hf = hf_rope(case)
        if hf is None:
            return call, cfg
        theta = cfg["rope_theta"]
        call = call.replace(f"rope_parameters={{'rope_theta': {theta:g}}}",
                            f"rope_parameters={hf.text(theta)}", 1)
        if hf.max_position_embeddings is not None:
            call = call.replace("LlamaConfig(", "LlamaConfig(max_position_embeddings="
                                f"{hf.max_position_embeddings}, ", 1)
        return call, {**cfg, "rope_scaling": hf.parameters,
                      "max_position_embeddings": hf.max_position_embeddings}

    call_template = "LlamaAttention(LlamaConfig({args}), layer_idx=0)"
    module, model = "llama", "Llama"

    def notes(self, case, module):
        scaled = []
        if case.attention.rope is not None and case.attention.rope.scaling is not None:
            from conformance.runners.hf.common import import_torch

            rot = self.rotary(import_torch(), module.config)
            scaled = [f"LlamaRotaryEmbedding: rope_type {rot.rope_type}, attention_scaling "
                      f"{rot.attention_scaling:.6g} on cos and sin"]
        return self.rope_notes(case) + scaled + self.decode_notes(case, module) + [
            "attention_bias=True biases q_proj, k_proj, v_proj and o_proj (the suite's bias)"]

    sizes = SizeFacts("per_head", f"{LLAMA_SOURCE}#L206", "q_proj.weight", "out x in (nn.Linear)",
                      "q_proj, k_proj, v_proj, o_proj are nn.Linear: (out, in)",
                      "(H + H_kv) d E x 2 (+ (H + 2 H_kv) d + E biases)",
                      "probe E=8, H=2, d=4, bias: {n}")
