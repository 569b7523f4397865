"""HuggingFace T5: `T5Attention`, the relative position bias off.

T5Config's `d_kv` is the per-head size, independent of d_model / num_heads
(q, k, v: nn.Linear(d_model, num_heads * d_kv, bias=False); o: nn.Linear(
num_heads * d_kv, d_model, bias=False)).  No biases, and NO 1/sqrt(d) scaling
(`self.scaling = 1.0`: T5 folds it into the initialisation of W_q), so a case
runs here only with bias false and `attention.scale: 1.0`.  Built with
has_relative_attention_bias=False (the per-layer learned bias of T5's first
layer is not part of a multi-head attention layer); with it off the module adds
a zero position_bias.  Masks: T5's eager path adds the 4-D mask to the scores.
"""
from __future__ import annotations

from ..contract import Convention
from ._hf import (SOURCE, HFRunner, cross_reason, out_in, out_proj, shape_limits)

T5_SOURCE = SOURCE + "t5/modeling_t5.py"


class HFT5(HFRunner):
    name = "hf.t5"
    system = "transformers.models.t5.modeling_t5.T5Attention"
    path = "has_relative_attention_bias=False"
    backend = "eager"
    probe_attention = {"bias": False}
    probe_scale = 1.0
    sets_scale = True  # by having none: expressible exactly when the case asks for 1.0

    def limits(self, case):
        a = case.attention
        scale = a.scale
        return (cross_reason(case, "T5Attention takes one key_value_states")
                or shape_limits(case, gqa=False, equal_dims=True)
                or (None if not a.bias else "bias=True: T5Attention's q, k, v and o are "
                    "nn.Linear(..., bias=False); T5 has no projection biases")
                or (None if scale == 1.0 else
                    f"scale {'1/sqrt(d_k) (the default)' if scale is None else scale}: "
                    "T5Attention does not scale the scores (self.scaling = 1.0; T5 folds "
                    "1/sqrt(d) into W_q's initialisation), and no config field sets it"))

    def config_call(self, case):
        a = case.attention
        cfg = {"d_model": a.query_features, "num_heads": a.num_heads, "d_kv": a.qk_head_dim}
        return (f"T5Attention(T5Config(d_model={a.query_features}, num_heads={a.num_heads}, "
                f"d_kv={a.qk_head_dim}), has_relative_attention_bias=False)", cfg)

    def build(self, torch, plan):
        from transformers import T5Config
        from transformers.models.t5.modeling_t5 import T5Attention

        config = T5Config(d_model=plan["d_model"], num_heads=plan["num_heads"],
                          d_kv=plan["d_kv"], dropout_rate=plan["dropout"],
                          attn_implementation=plan["attn_implementation"])
        return T5Attention(config, has_relative_attention_bias=False)

    def state(self, case, weights):
        return {"q.weight": out_in(weights.wq), "k.weight": out_in(weights.wk),
                "v.weight": out_in(weights.wv), "o.weight": out_proj(weights.wo)}

    def forward(self, module, x, mask, **kw):
        out, _, weights = module(x, mask=mask, **kw)
        return out, weights

    def notes(self, case, module):
        return ["has_relative_attention_bias=False: no relative position bias (a zero "
                "position_bias is added); scores are not scaled (scaling = 1.0)"]

    def size_cells(self, case):
        module, _ = self.probe_module(case)
        q = tuple(module.q.weight.shape)
        return [
            Convention("size_arguments", "per_head",
                       f"T5Config(d_model=8, num_heads=2, d_kv={case.attention.qk_head_dim}): "
                       f"q.weight {q}: d_kv is per head, any value", "per_head",
                       f"{T5_SOURCE}#L193"),
            Convention("parameter_formula", "4 H d_kv E (no biases)",
                       f"probe E=8, H=2, d_kv=4: {sum(p.numel() for p in module.parameters())}"),
            Convention("weight_layout", f"q.weight {q} out x in (nn.Linear, bias=False)",
                       "q, k, v, o are nn.Linear without bias: (out, in)")]
