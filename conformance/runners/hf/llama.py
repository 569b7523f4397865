"""HuggingFace Llama: `LlamaAttention`, rotary embedding neutralised.

LlamaConfig's `head_dim` is the per-head size (default hidden_size //
num_attention_heads, any value allowed); `num_key_value_heads` < heads gives
grouped-query attention; `attention_bias` puts a bias on q_proj, k_proj,
v_proj AND o_proj (exactly the suite's `bias`).  The rotary embedding is
applied inside forward to q and k from `position_embeddings=(cos, sin)`: this
runner passes cos = 1, sin = 0 (the identity rotation), so the module computes
plain multi-head attention; the row says so.  LlamaModel always builds a
causal mask; the module itself attends to what attention_mask allows (eager:
the additive (B, 1, T, S) mask; None = every key).
"""
from __future__ import annotations

from conformance.runners.hf.common import SOURCE, Refusals, SizeFacts
from conformance.runners.hf.probes import ProbedHFRunner

LLAMA_SOURCE = SOURCE + "llama/modeling_llama.py"


class HFLlama(ProbedHFRunner):
    name = "hf.llama"
    system = "transformers.models.llama.modeling_llama.LlamaAttention"
    path = "rotary neutralised (cos=1, sin=0)"
    backend = "eager"
    typed_system = "hf.llama"
    description = "`LlamaAttention` (`head_dim`, grouped-query, rotary neutralised)"

    refusals = Refusals("LlamaAttention is self-attention only (hidden_states)", gqa=True,
                        scale_why="a scale other than 1/sqrt(head_dim): LlamaAttention.scaling "
                        "= head_dim**-0.5, not a config field")
    linear_names = ("q_proj", "k_proj", "v_proj", "o_proj")

    config_fields = {"hidden_size": "query_features", "num_attention_heads": "num_heads",
                     "num_key_value_heads": "num_kv_heads", "head_dim": "qk_head_dim",
                     "attention_bias": "bias"}
    call_template = "LlamaAttention(LlamaConfig({args}), layer_idx=0)"

    def build(self, torch, plan):
        from transformers import LlamaConfig
        from transformers.models.llama.modeling_llama import LlamaAttention

        keys = ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
                "attention_bias", "attn_implementation")
        config = LlamaConfig(**{k: plan[k] for k in keys}, attention_dropout=plan["dropout"])
        module = LlamaAttention(config, layer_idx=0)
        module.rotary_identity = True
        return module

    def forward(self, module, x, mask, **kw):
        import torch

        shape = (*x.shape[:-1], module.head_dim)
        cos, sin = torch.ones(shape, dtype=x.dtype), torch.zeros(shape, dtype=x.dtype)
        return module(x, position_embeddings=(cos, sin), attention_mask=mask, **kw)[:2]

    def notes(self, case, module):
        return ["rotary embedding neutralised: position_embeddings=(cos=1, sin=0), the identity "
                "rotation; LlamaModel would rotate q and k by position",
                "attention_bias=True biases q_proj, k_proj, v_proj and o_proj (the suite's bias)"]

    sizes = SizeFacts("per_head", f"{LLAMA_SOURCE}#L206", "q_proj.weight", "out x in (nn.Linear)",
                      "q_proj, k_proj, v_proj, o_proj are nn.Linear: (out, in)",
                      "(H + H_kv) d E x 2 (+ (H + 2 H_kv) d + E biases)",
                      "probe E=8, H=2, d=4, bias: {n}")
    def size_evidence(self, case, module, shape):
        return (f"LlamaConfig(hidden_size=8, num_attention_heads=2, head_dim={module.head_dim}): "
                f"q_proj.weight {shape}; head_dim any value")
