"""mlx-lm's Gemma 3 text attention (`mlx_lm.models.gemma3_text.Attention`), the layer the
case asks, with the mask its `Gemma3Model` builds for that layer.

mlx-lm 0.32.2's gemma3_text.py ties a layer's type to its index (GEMMA3 below): layer i is
sliding when (i + 1) % sliding_window_pattern != 0 (#L55), and a sliding layer rotates at
`rope_local_base_freq` without scaling, a global one at `rope_theta` with the config's
`rope_scaling` (#L57-L70); Gemma3Model.__call__ gives each layer the global mask or the
sliding-window one (#L195-L210: create_attention_mask(h, cache, window_size=
sliding_window), j > i - window).  So a schedule is expressible where its layer types are
(sliding_window_pattern - 1) sliding layers to one full, repeated (all full: pattern 1),
with no scaling on the sliding type and no NoPE layer; q_norm and k_norm are its RMSNorm
scaling by (1 + weight) (#L104-L111: the canonical scale s loads as s - 1), the scale
query_pre_attn_scalar**-0.5 (#L46), no biases (#L48-L51).

The runner builds ModelArgs at the case's widths, calls Gemma3Model.__call__ with its
layers replaced by recorders to take the mask the model builds for each layer, then calls
the real Attention of the asked layer, loaded with the canonical weights, with that mask.
Positions reach the attention only through `cache.offset` (`self.rope(q, offset=
cache.offset)`): each layer gets a cache that has seen the case's first position and holds
no earlier key (update_and_fetch returns the call's own keys), the state mlx_lm.llama4's
ChunkedKVCache is in after a trim.  mlx and mlx_lm are imported inside functions only.
"""
from __future__ import annotations

import numpy as np

from conformance.contract.runner import NotExpressible, Observation, Translation, harness_limit
from conformance.runners._rope_config import hf_rope
from conformance.runners.mlx.common import MlxRunner, held_dtype, import_mlx, to_f64, to_mx
from conformance.runners.mlx.lm_llama4 import linear_weights

GEMMA3 = "https://github.com/ml-explore/mlx-lm/blob/v0.32.2/mlx_lm/models/gemma3_text.py"


def pattern_of(types: tuple[str, ...]) -> int | None:
    """The sliding_window_pattern giving `types` ((p - 1) sliding then one full, repeated),
    or None where no pattern does."""
    p = types.index("full") + 1 if "full" in types else None
    if p is None or types != tuple("sliding" if (i + 1) % p else "full"
                                   for i in range(len(types))):
        return None
    return p


def schedule_args(case) -> dict | str:
    """ModelArgs keywords for the case's schedule, or why mlx-lm's Gemma 3 has none."""
    s, a = case.attention.layer_schedule, case.attention
    if s is None:
        return harness_limit("no attention.layer_schedule: this runner calls a layer of a "
                             "Gemma 3 schedule (the fused op alone is mlx.sdpa)")
    if s.nope_layers:
        return (f"nope_layers {list(s.nope_layers)}: every layer of mlx-lm's Gemma 3 builds a "
                f"rope (initialize_rope, {GEMMA3}#L57-L70)")
    p = pattern_of(s.layer_types)
    if p is None:
        return (f"layer_types {list(s.layer_types)}: mlx-lm's Gemma 3 makes layer i sliding "
                f"when (i + 1) % sliding_window_pattern != 0 ({GEMMA3}#L55)")
    kinds = dict(s.kinds)
    if "sliding" in kinds and kinds["sliding"].rope_scaling is not None:
        return ("a scaling on the sliding type: a sliding layer's initialize_rope takes "
                f"rope_local_base_freq and no scaling_config ({GEMMA3}#L57-L62)")
    full = kinds["full"]
    scaled = None
    if full.rope_scaling is not None:
        from dataclasses import replace

        scaled = hf_rope(replace(case, attention=replace(a, rope=replace(
            a.rope, scaling=full.rope_scaling))))
    return {"num_hidden_layers": s.num_layers, "sliding_window_pattern": p,
            "rope_theta": float(full.rope_base),
            "rope_local_base_freq": float(kinds.get("sliding", full).rope_base),
            "sliding_window": kinds["sliding"].window if "sliding" in kinds else 512,
            "rope_scaling": None if scaled is None else dict(scaled.parameters),
            **({} if scaled is None or not scaled.max_position_embeddings else
               {"max_position_embeddings": scaled.max_position_embeddings})}


def layer_limits(case) -> str | None:
    a, n, r = case.attention, case.attention.qk_norm, case.attention.rope
    if not case.inputs.self_attention or case.has_non_causal_mask or case.mask.causal == "none":
        return ("causal self-attention only: Attention.__call__(x, mask, cache) projects one "
                f"input and Gemma3Model builds its causal masks ({GEMMA3}#L195-L210)")
    if a.bias:
        return ("bias=True: q_proj, k_proj, v_proj, o_proj are nn.Linear(bias=False) "
                f"({GEMMA3}#L48-L51)")
    if n is None or n.kind != "rms" or n.scope != "per_head":
        return ("qk_norm other than RMS per head: Attention applies q_norm = RMSNorm(head_dim) "
                f"and k_norm on every call ({GEMMA3}#L53-L54)")
    if r.style != "half_split" or r.rotary_dim != a.qk_head_dim:
        return ("rope other than half-split over the whole head: initialize_rope(dims="
                f"head_dim, traditional=False) ({GEMMA3}#L57-L70)")
    if a.qk_head_dim != a.v_head_dim or a.output_features != a.query_features:
        return "one head_dim for q, k and v, and o_proj back to hidden_size"
    return None


def model_args(case, kw: dict) -> dict:
    a = case.attention
    scale = a.scale if a.scale is not None else a.qk_head_dim ** -0.5
    return {"model_type": "gemma3_text", "hidden_size": a.query_features,
            "intermediate_size": 1, "num_attention_heads": a.num_heads, "head_dim": a.qk_head_dim,
            "num_key_value_heads": a.num_kv_heads, "rms_norm_eps": a.qk_norm.eps,
            "vocab_size": 1, "query_pre_attn_scalar": scale ** -2, **kw}


class _Seen:
    """A cache that has seen `offset` positions and holds none of them."""

    def __init__(self, offset: int):
        self.offset = offset

    def update_and_fetch(self, keys, values):
        self.offset += keys.shape[2]
        return keys, values


class MlxLmGemma3(MlxRunner):
    name = "mlx_lm.gemma3_text"
    typed_system = "hf.mistral"  # ModelArgs: MistralConfig's words (no attention_bias)
    system = "mlx_lm.models.gemma3_text.Attention"
    path = "one layer of mlx_lm.models.gemma3_text.Gemma3Model, its mask from the model"
    requires = ("mlx", "mlx_lm")
    description = ("mlx-lm's Gemma 3 text `Attention` at a layer of its schedule "
                   "(`sliding_window_pattern`, `rope_local_base_freq` / `rope_theta` with "
                   "`rope_scaling`), its mask from `Gemma3Model`, positions from a cache offset")
    features = MlxRunner.features | {"rope", "position_offset", "qk_norm", "layer_schedule"}
    probe_needs = {"bias": False, "qk_norm": {"kind": "rms", "scope": "per_head"}}

    def translate(self, case):
        kw = schedule_args(case)
        if isinstance(kw, str):
            return NotExpressible(kw)
        why = layer_limits(case)
        if why:
            return NotExpressible(why)
        layer = case.attention.layer_schedule.layer
        args = ", ".join(f"{k}={v!r}" for k, v in model_args(case, kw).items())
        return Translation(f"Attention(ModelArgs({args}), layer_idx={layer})(x, mask=<"
                           f"Gemma3Model's mask for layer {layer}>, cache=<offset "
                           f"{case.inputs.position_offset}>)", {"layer": layer, **kw})

    def model_masks(self, mx, model, caches, batch: int, length: int) -> dict:
        """layer index -> the mask Gemma3Model.__call__ builds for it (its layers recorded)."""
        seen = {}

        def recorder(i):
            def record(h, mask, cache=None):
                seen[i] = mask
                return h
            return record
        model.layers = [recorder(i) for i in range(len(model.layers))]
        model(mx.zeros((batch, length), dtype=mx.int32), cache=caches)
        return seen

    def run(self, case, translation, data):
        mx, _ = import_mlx()
        from mlx.utils import tree_flatten
        from mlx_lm.models import gemma3_text

        dtype, i = case.inputs.dtype, case.inputs
        plan = {k: v for k, v in translation.plan.items() if k != "layer"}
        idx = translation.plan["layer"]
        args = gemma3_text.ModelArgs(**model_args(case, plan))
        caches = [_Seen(i.position_offset) for _ in range(args.num_hidden_layers)]
        mask = self.model_masks(mx, gemma3_text.Gemma3Model(args), caches, i.batch,
                                i.query_len)[idx]
        layer = gemma3_text.Attention(args, idx)
        layer.set_dtype(getattr(mx, dtype))
        named = linear_weights(case, data.weights)
        named.update({"q_norm.weight": data.weights.q_norm - 1.0,
                      "k_norm.weight": data.weights.k_norm - 1.0})
        layer.load_weights([(n, to_mx(mx, a, dtype)) for n, a in named.items()], strict=True)
        out = layer(to_mx(mx, data.inputs.query, dtype), mask=mask, cache=caches[idx])
        mx.eval(out)
        shapes = {n: tuple(v.shape) for n, v in tree_flatten(layer.parameters())}
        mask_word = mask if isinstance(mask, str) else f"boolean {tuple(mask.shape)}"
        return Observation(
            output=to_f64(mx, out), parameters=sum(int(np.prod(s)) for s in shapes.values()),
            weight_shapes=shapes,
            notes=[f"layer {idx}: is_sliding={layer.is_sliding}, rope "
                   f"{type(layer.rope).__name__}; Gemma3Model's mask for it: {mask_word} "
                   f"({GEMMA3}#L195-L210); positions from cache offset {i.position_offset}",
                   "returns no attention weights"],
            extras={"output_dtype": held_dtype(out), "mask": mask_word})
