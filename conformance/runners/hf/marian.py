"""HuggingFace Marian (`MarianMTModel`, the port of Marian NMT): `MarianAttention`.

The BART-style attention class: q_proj, k_proj, v_proj, out_proj all
nn.Linear(embed_dim, embed_dim) with bias, head_dim = embed_dim // num_heads
(ValueError "embed_dim must be divisible by num_heads" otherwise), scale
head_dim**-0.5.  It does cross-attention with `key_value_states` (one tensor
for keys and values).  MarianMTModel builds it with its default bias=True;
the constructor's `bias=` is reached by no MarianConfig field.
"""
from __future__ import annotations

from conformance.runners.hf.common import SOURCE, SizeFacts
from conformance.runners.hf.declared import Refusals
from conformance.runners.hf.probed import ProbedHFRunner

MARIAN_SOURCE = SOURCE + "marian/modeling_marian.py"


class HFMarian(ProbedHFRunner):
    name = "hf.marian"
    system = "transformers.models.marian.modeling_marian.MarianAttention"
    backend = "eager"
    typed_system = "hf.marian"
    description = "`MarianAttention` (HuggingFace's port of Marian)"
    # the runner builds the eager attention function; MarianMTModel(config) gets "sdpa"
    # (transformers/modeling_utils.py, get_correct_attn_implementation), which reads a
    # causal switch eager ignores: the ledger measures both (conventions/probes/choices.py)
    harness_choices = {"attn_implementation": ("eager", "sdpa")}

    linear_names = ("q_proj", "k_proj", "v_proj", "out_proj")

    config_fields = {"d_model": "query_features", "encoder_attention_heads": "num_heads"}
    call_template = ("MarianAttention(embed_dim={d_model}, num_heads={encoder_attention_heads}, "
                     "config=MarianConfig({args}))")

    def build(self, torch, plan):
        from transformers import MarianConfig
        from transformers.models.marian.modeling_marian import MarianAttention

        config = MarianConfig(d_model=plan["d_model"],
                              encoder_attention_heads=plan["encoder_attention_heads"],
                              attention_dropout=plan["dropout"],
                              attn_implementation=plan["attn_implementation"])
        return MarianAttention(plan["d_model"], plan["encoder_attention_heads"],
                               dropout=config.attention_dropout, config=config)

    refusals = Refusals(
        "MarianAttention takes one key_value_states",
        width_fixed="MarianAttention sets head_dim = embed_dim // num_heads",
        fixed_bias=(True, "MarianMTModel's layers build MarianAttention with its default "
                    "bias=True; no MarianConfig field reaches it"),
        scale_why="a scale other than 1/sqrt(head_dim): MarianAttention.scaling = "
        "head_dim**-0.5, not a config field")

    sizes = SizeFacts("derived_from_width", f"{MARIAN_SOURCE}#L136", "q_proj.weight",
                      "out x in (nn.Linear)",
                      "q_proj, k_proj, v_proj, out_proj are nn.Linear: (out, in)", "4E^2 + 4E")
    def size_evidence(self, case, module, shape):
        return (f"MarianAttention(embed_dim=8, num_heads=2): head_dim {module.head_dim}, "
                f"q_proj.weight {shape}; no head-size argument")
