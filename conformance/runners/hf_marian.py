"""HuggingFace Marian (`MarianMTModel`, the port of Marian NMT): `MarianAttention`.

The BART-style attention class: q_proj, k_proj, v_proj, out_proj all
nn.Linear(embed_dim, embed_dim) with bias, head_dim = embed_dim // num_heads
(ValueError "embed_dim must be divisible by num_heads" otherwise), scale
head_dim**-0.5.  It does cross-attention with `key_value_states` (one tensor
for keys and values).  MarianMTModel builds it with its default bias=True;
the constructor's `bias=` is reached by no MarianConfig field.
"""
from __future__ import annotations

from ..contract import Convention
from ._hf import (SOURCE, HFRunner, cross_reason, default_scale, out_in, out_proj,
                  shape_limits, width_limits)

MARIAN_SOURCE = SOURCE + "marian/modeling_marian.py"


class HFMarian(HFRunner):
    name = "hf.marian"
    system = "transformers.models.marian.modeling_marian.MarianAttention"
    backend = "eager"

    def limits(self, case):
        a = case.attention
        return (cross_reason(case, "MarianAttention takes one key_value_states")
                or width_limits(case, "MarianAttention sets head_dim = embed_dim // num_heads")
                or shape_limits(case, gqa=False, equal_dims=True)
                or (None if a.bias else "bias=False: MarianMTModel's layers build MarianAttention "
                    "with its default bias=True; no MarianConfig field reaches it")
                or (None if default_scale(case) else "a scale other than 1/sqrt(head_dim): "
                    "MarianAttention.scaling = head_dim**-0.5, not a config field"))

    def config_call(self, case):
        a = case.attention
        cfg = {"d_model": a.query_features, "encoder_attention_heads": a.num_heads}
        return (f"MarianAttention(embed_dim={a.query_features}, num_heads={a.num_heads}, "
                f"config=MarianConfig(d_model={a.query_features}, encoder_attention_heads="
                f"{a.num_heads}))", cfg)

    def build(self, torch, plan):
        from transformers import MarianConfig
        from transformers.models.marian.modeling_marian import MarianAttention

        config = MarianConfig(d_model=plan["d_model"],
                              encoder_attention_heads=plan["encoder_attention_heads"],
                              attention_dropout=plan["dropout"],
                              attn_implementation=plan["attn_implementation"])
        return MarianAttention(plan["d_model"], plan["encoder_attention_heads"],
                               dropout=config.attention_dropout, config=config)

    def state(self, case, weights):
        s = {}
        for native, w, b in (("q_proj", weights.wq, weights.bq), ("k_proj", weights.wk, weights.bk),
                             ("v_proj", weights.wv, weights.bv)):
            s[f"{native}.weight"], s[f"{native}.bias"] = out_in(w), b.ravel()
        s["out_proj.weight"], s["out_proj.bias"] = out_proj(weights.wo), weights.bo
        return s

    def forward(self, module, x, mask, **kw):
        out, weights = module(x, attention_mask=mask, **kw)[:2]
        return out, weights

    def size_cells(self, case):
        module, _ = self.probe_module(case)
        q = tuple(module.q_proj.weight.shape)
        return [
            Convention("size_arguments", "derived_from_width",
                       f"MarianAttention(embed_dim=8, num_heads=2): head_dim {module.head_dim}, "
                       f"q_proj.weight {q}; no head-size argument", "derived_from_width",
                       f"{MARIAN_SOURCE}#L136"),
            Convention("parameter_formula", "4E^2 + 4E",
                       f"probe E=8: {sum(p.numel() for p in module.parameters())}"),
            Convention("weight_layout", f"q_proj.weight {q} out x in (nn.Linear)",
                       "q_proj, k_proj, v_proj, out_proj are nn.Linear: (out, in)")]
