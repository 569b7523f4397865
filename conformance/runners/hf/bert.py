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

from conformance.runners.hf.common import SOURCE, SizeFacts
from conformance.runners.hf.declared import Refusals
from conformance.runners.hf.probed import ProbedHFRunner

BERT_SOURCE = SOURCE + "bert/modeling_bert.py"


class HFBert(ProbedHFRunner):
    name = "hf.bert"
    system = "transformers.models.bert.modeling_bert.BertSelfAttention"
    path = "self-attention + output.dense"
    backend = "eager"
    typed_system = "hf.bert"
    description = ("HuggingFace `BertSelfAttention` + `BertSelfOutput.dense` (LayerNorm "
                   "counted apart), eager and sdpa attention implementations, built from a "
                   "config object")

    def __init__(self, **params):
        super().__init__(**params)
        self.backend = self.attn_implementation
        if self.attn_implementation != "eager":
            self.name = f"hf.bert.{self.attn_implementation}"

    linear_names = ("self.query", "self.key", "self.value", "output.dense")

    config_fields = {"hidden_size": "query_features", "num_attention_heads": "num_heads"}
    call_template = ("BertSelfAttention(BertConfig({args}, attn_implementation={impl!r})) + "
                     "BertSelfOutput(config).dense")

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

    refusals = Refusals(
        "BertCrossAttention takes one encoder_hidden_states",
        width_fixed="BertSelfAttention sets attention_head_size = int(hidden_size / "
        "num_attention_heads)",
        fixed_bias=(True, "BertSelfAttention's query/key/value and BertSelfOutput.dense are "
                    "nn.Linear with their default bias=True; BertConfig has no switch for them"),
        scale_why="a scale other than 1/sqrt(head size): BertSelfAttention.scaling = "
        "attention_head_size**-0.5, not a config field")

    def forward(self, module, x, mask, **kw):
        context, weights = module["self"](x, attention_mask=mask, **kw)
        return module["output"]["dense"](context), weights

    def notes(self, case, module):
        e = case.attention.query_features
        return [f"compared: BertSelfAttention + BertSelfOutput.dense; BertAttention also holds "
                f"BertSelfOutput.LayerNorm ({module.layer_norm_parameters} = 2E = 2 x {e} "
                "parameters, not counted here) and adds the residual before it: both left out"]

    sizes = SizeFacts("derived_from_width", f"{BERT_SOURCE}#L140", "self.query.weight",
                      "out x in (nn.Linear)",
                      "query, key, value and output.dense are nn.Linear: (out, in)",
                      "4E^2 + 4E (+ 2E LayerNorm in BertAttention)", "probe E=8: {n} counted")
    def size_evidence(self, case, module, shape):
        from transformers import BertConfig
        from transformers.models.bert.modeling_bert import BertSelfAttention
        asked = BertSelfAttention(BertConfig(hidden_size=8, num_attention_heads=2,
                                             attention_head_size=8))
        return ("BertConfig(hidden_size=8, num_attention_heads=2, attention_head_size=8) "
                f"is accepted and the extra field ignored: attention_head_size = "
                f"{asked.attention_head_size}, query.weight {tuple(asked.query.weight.shape)}")
