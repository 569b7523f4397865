"""HuggingFace BERT: `BertSelfAttention` plus the output dense of `BertSelfOutput`.

`BertAttention` = BertSelfAttention (query/key/value nn.Linear(hidden, hidden))
+ BertSelfOutput (dense nn.Linear(hidden, hidden), dropout, then
LayerNorm(dense(x) + residual)).  The part comparable with a multi-head
attention layer is self-attention + output.dense: this runner calls exactly
those two (the LayerNorm and the residual are left out, and the LayerNorm's 2E
parameters are reported apart in the notes and extras).
Conventions: no head-size setting (attention_head_size = int(hidden_size /
num_attention_heads); "The hidden size (...) is not a multiple of the number of
attention heads (...)" when it does not divide), nn.Linear always with biases,
scale 1/sqrt(head size).  Two rows: attn_implementation "eager" (adds the 4-D
mask to the scores, whatever its dtype) and "sdpa" (hands it to
F.scaled_dot_product_attention, which reads a boolean mask as True = attend).
"""
from __future__ import annotations

from ..contract import Convention
from ._hf import (DOCS, SOURCE, HFRunner, cross_reason, default_scale, out_in, out_proj,
                  shape_limits, width_limits)

BERT_SOURCE = SOURCE + "bert/modeling_bert.py"


class HFBert(HFRunner):
    name = "hf.bert"
    system = "transformers.models.bert.modeling_bert.BertSelfAttention"
    path = "self-attention + output.dense"
    backend = "eager"

    def __init__(self, **params):
        super().__init__(**params)
        self.backend = self.attn_implementation
        if self.attn_implementation != "eager":
            self.name = f"hf.bert.{self.attn_implementation}"

    def limits(self, case):
        a = case.attention
        return (cross_reason(case, "BertCrossAttention takes one encoder_hidden_states")
                or width_limits(case, "BertSelfAttention sets attention_head_size = "
                                "int(hidden_size / num_attention_heads)")
                or shape_limits(case, gqa=False, equal_dims=True)
                or (None if a.bias else "bias=False: BertSelfAttention's query/key/value and "
                    "BertSelfOutput.dense are nn.Linear with their default bias=True; "
                    "BertConfig has no switch for them")
                or (None if default_scale(case) else "a scale other than 1/sqrt(head size): "
                    "BertSelfAttention.scaling = attention_head_size**-0.5, not a config field"))

    def config_call(self, case):
        a = case.attention
        cfg = {"hidden_size": a.query_features, "num_attention_heads": a.num_heads}
        return (f"BertSelfAttention(BertConfig(hidden_size={a.query_features}, "
                f"num_attention_heads={a.num_heads}, attn_implementation="
                f"{self.attn_implementation!r})) + BertSelfOutput(config).dense", cfg)

    def build(self, torch, plan):
        from transformers import BertConfig
        from transformers.models.bert.modeling_bert import BertSelfAttention, BertSelfOutput

        p = plan["dropout"]
        config = BertConfig(hidden_size=plan["hidden_size"],
                            num_attention_heads=plan["num_attention_heads"],
                            attention_probs_dropout_prob=p, hidden_dropout_prob=0.0,
                            attn_implementation=plan["attn_implementation"])
        attn, output = BertSelfAttention(config), BertSelfOutput(config)
        module = torch.nn.ModuleDict({"self": attn,
                                      "output": torch.nn.ModuleDict({"dense": output.dense})})
        module.layer_norm_parameters = sum(q.numel() for q in output.LayerNorm.parameters())
        return module

    def state(self, case, weights):
        s = {}
        for native, w, b in (("query", weights.wq, weights.bq), ("key", weights.wk, weights.bk),
                             ("value", weights.wv, weights.bv)):
            s[f"self.{native}.weight"], s[f"self.{native}.bias"] = out_in(w), b.ravel()
        s["output.dense.weight"], s["output.dense.bias"] = out_proj(weights.wo), weights.bo
        return s

    def forward(self, module, x, mask, **kw):
        context, weights = module["self"](x, attention_mask=mask, **kw)
        return module["output"]["dense"](context), weights

    def notes(self, case, module):
        e = case.attention.query_features
        return [f"compared: BertSelfAttention + BertSelfOutput.dense; BertAttention also holds "
                f"BertSelfOutput.LayerNorm ({module.layer_norm_parameters} = 2E = 2 x {e} "
                "parameters, not counted here) and adds the residual before it: both left out"]

    def size_cells(self, case):
        torch_module, _ = self.probe_module(case)
        q = tuple(torch_module["self"].query.weight.shape)
        from transformers import BertConfig
        from transformers.models.bert.modeling_bert import BertSelfAttention
        asked = BertSelfAttention(BertConfig(hidden_size=8, num_attention_heads=2,
                                             attention_head_size=8))
        src = f"{BERT_SOURCE}#L140"
        return [
            Convention("size_arguments", "derived_from_width",
                       "BertConfig(hidden_size=8, num_attention_heads=2, attention_head_size=8) "
                       f"is accepted and the extra field ignored: attention_head_size = "
                       f"{asked.attention_head_size}, query.weight "
                       f"{tuple(asked.query.weight.shape)}",
                       "derived_from_width", src),
            Convention("parameter_formula", "4E^2 + 4E (+ 2E LayerNorm in BertAttention)",
                       f"probe E=8: {sum(p.numel() for p in torch_module.parameters())} counted",
                       documented_source=DOCS + "bert"),
            Convention("weight_layout", f"self.query.weight {q} out x in (nn.Linear)",
                       "query, key, value and output.dense are nn.Linear: (out, in)")]
