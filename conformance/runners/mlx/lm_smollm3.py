"""mlx-lm's SmolLM3 (`mlx_lm.models.smollm3.Model`): the Llama attention of the case's layer
as the model builds it, its rotation swapped for NoPE where the schedule says.

mlx-lm 0.32.2's smollm3.py holds `no_rope_layers` as transformers does, one flag per layer,
1 = RoPE (SMOLLM3 below, #L20-L24: `int((i + 1) % no_rope_layer_interval != 0)` by
default), and Model.__init__ replaces `self_attn.rope` of every layer whose flag is 0 with
`NoPE()`, an identity (#L28-L33, #L48-L50).  The runner passes the case's
attention.layer_schedule as those flags (0 at each of its nope_layers), builds the Model at
the case's widths and calls `model.layers[layer].self_attn` (llama.py's Attention:
`rope(q, offset=cache.offset)`, scale head_dim**-0.5) loaded with the canonical weights,
with the mask LlamaModel builds (its layers recorded, mlx_lm.gemma3_text's way) and a
cache that has seen the case's first position and holds no earlier key.  Full layers only
(no sliding type), the schedule's base as rope_theta, half-split pairs (rope_traditional
False), no scaling.  mlx and mlx_lm are imported inside functions only.
"""
from __future__ import annotations

import numpy as np

from conformance.contract.runner import NotExpressible, Observation, Translation, harness_limit
from conformance.runners.mlx.common import MlxRunner, held_dtype, import_mlx, to_f64, to_mx
from conformance.runners.mlx.lm_gemma3 import _Seen
from conformance.runners.mlx.lm_llama4 import linear_weights

SMOLLM3 = "https://github.com/ml-explore/mlx-lm/blob/v0.32.2/mlx_lm/models/smollm3.py"
LLAMA = "https://github.com/ml-explore/mlx-lm/blob/v0.32.2/mlx_lm/models/llama.py"


def model_args(case) -> dict | str:
    """smollm3.ModelArgs keywords for the case, or why the runner cannot ask it."""
    s, a = case.attention.layer_schedule, case.attention
    if s is None:
        return harness_limit("no attention.layer_schedule: this runner calls a layer of a "
                             "SmolLM3 schedule (the fused op alone is mlx.sdpa)")
    if "sliding" in s.layer_types or s.settings("full").rope_scaling is not None:
        return harness_limit("a sliding type or a scaled rope: the runner asks SmolLM3's full "
                             "layers at an unscaled rope_theta")
    r = a.rope
    if r.style != "half_split" or r.rotary_dim != a.qk_head_dim:
        return ("rope other than half-split over the whole head: llama.py's Attention calls "
                f"initialize_rope(head_dim, rope_theta, rope_traditional) ({LLAMA}#L66-L72)")
    if a.scale is not None and abs(a.scale - a.qk_head_dim ** -0.5) > 1e-12 * a.scale:
        return f"scale={a.scale:g}: Attention sets self.scale = head_dim**-0.5 ({LLAMA}#L55)"
    if (not case.inputs.self_attention or case.has_non_causal_mask
            or case.mask.causal == "none"):
        return ("causal self-attention only: Attention.__call__(x, mask, cache) projects one "
                f"input and LlamaModel builds its causal mask ({LLAMA}#L184-L195)")
    if a.qk_head_dim != a.v_head_dim or a.output_features != a.query_features:
        return "one head_dim for q, k and v, and o_proj back to hidden_size"
    if a.qk_norm is not None:
        return "attention.qk_norm: SmolLM3's attention has no q_norm or k_norm"
    return {"model_type": "smollm3", "hidden_size": a.query_features,
            "num_hidden_layers": s.num_layers, "intermediate_size": 1,
            "num_attention_heads": a.num_heads, "num_key_value_heads": a.num_kv_heads,
            "head_dim": a.qk_head_dim, "rms_norm_eps": 1e-6, "vocab_size": 1,
            "attention_bias": a.bias, "rope_theta": float(s.settings("full").rope_base),
            "no_rope_layers": [0 if i in s.nope_layers else 1 for i in range(s.num_layers)]}


class MlxLmSmolLM3(MlxRunner):
    name = "mlx_lm.smollm3"
    typed_system = "hf.llama"  # llama.ModelArgs: LlamaConfig's words
    system = "mlx_lm.models.smollm3.Model"
    path = "model.layers[i].self_attn of mlx_lm.models.smollm3.Model, its mask from LlamaModel"
    requires = ("mlx", "mlx_lm")
    description = ("mlx-lm's SmolLM3: the Llama `Attention` of a layer of its schedule "
                   "(`no_rope_layers`: 1 = RoPE, 0 = `NoPE()`), its mask from `LlamaModel`, "
                   "positions from a cache offset")
    features = MlxRunner.features | {"rope", "position_offset", "layer_schedule"}

    def translate(self, case):
        kw = model_args(case)
        if isinstance(kw, str):
            return NotExpressible(kw)
        layer = case.attention.layer_schedule.layer
        shown = {k: v for k, v in kw.items() if k in ("num_hidden_layers", "no_rope_layers",
                                                      "rope_theta", "head_dim")}
        args = ", ".join(f"{k}={v!r}" for k, v in shown.items())
        return Translation(f"smollm3.Model(ModelArgs({args}, ...)).layers[{layer}].self_attn("
                           f"x, mask=<LlamaModel's mask>, cache=<offset "
                           f"{case.inputs.position_offset}>)", {"layer": layer, **kw})

    def run(self, case, translation, data):
        mx, _ = import_mlx()
        from mlx.utils import tree_flatten
        from mlx_lm.models import smollm3

        dtype, i = case.inputs.dtype, case.inputs
        plan = dict(translation.plan)
        idx = plan.pop("layer")
        model = smollm3.Model(smollm3.ModelArgs(**plan))
        layer = model.model.layers[idx].self_attn
        caches = [_Seen(i.position_offset) for _ in model.model.layers]
        seen = {}

        def recorder(n):
            def record(h, mask, cache=None):
                seen[n] = mask
                return h
            record.use_sliding = False  # LlamaModel picks each layer's mask by it
            return record
        model.model.layers = [recorder(n) for n in range(len(caches))]
        model.model(mx.zeros((i.batch, i.query_len), dtype=mx.int32), cache=caches)
        layer.set_dtype(getattr(mx, dtype))
        layer.load_weights([(n, to_mx(mx, a, dtype)) for n, a in
                            linear_weights(case, data.weights).items()], strict=True)
        out = layer(to_mx(mx, data.inputs.query, dtype), mask=seen[idx], cache=caches[idx])
        mx.eval(out)
        shapes = {n: tuple(v.shape) for n, v in tree_flatten(layer.parameters())}
        return Observation(
            output=to_f64(mx, out), parameters=sum(int(np.prod(s)) for s in shapes.values()),
            weight_shapes=shapes,
            notes=[f"layer {idx}: no_rope_layers[{idx}] = {plan['no_rope_layers'][idx]}, its "
                   f"rope {type(layer.rope).__name__} ({SMOLLM3}#L48-L50); LlamaModel's mask "
                   f"{seen[idx]!r}; positions from cache offset {i.position_offset}",
                   "returns no attention weights"],
            extras={"output_dtype": held_dtype(out)})
