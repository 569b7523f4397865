"""mlx-lm's Llama 4 text attention (`mlx_lm.models.llama4.Attention`), one layer as its
`LlamaModel` drives it: the layer's mask from the model's own builder, positions from the
cache offset.

mlx-lm 0.32.2's llama4.py ties a layer's kind to its index (LLAMA4 below): layers with
(idx + 1) % 4 != 0 rotate q and k (`initialize_rope(head_dim, rope_theta,
traditional=True)`: interleaved pairs, the whole head, #L79-L86) and are chunked
(LlamaModel.__call__#L237-L253: `linds // attention_chunk_size == rinds //
attention_chunk_size` and `linds <= rinds`, over the cache's start_position and offset);
the fourth has no RoPE, the causal mask, and Llama 4's temperature where
`attn_temperature_tuning` (#L115-L125: log(floor(arange(offset + 1, offset + L + 1) /
floor_scale) + 1) * attn_scale + 1 on the queries).  So a case with attention.rope and
mask.chunk runs layer 0, a case with neither runs layer 3 (its temperature where the case
asks): a rotated layer without chunks, a chunk without rotation or a temperature with it
is no layer of this model.

The runner builds TextArgs at the case's widths (4 layers, tiny MoE sizes the attention
never sees), calls LlamaModel.__call__ with its layers replaced by recorders to take the
mask the model builds for each layer, then calls the real Attention of the asked layer,
loaded with the canonical weights, on the case's input with that mask.  Positions reach
mlx-lm's attention only through `cache.offset`: each layer gets a ChunkedKVCache whose
offset and start_position are the case's first position and which holds no earlier key
(the state mlx-lm's own chunked cache is in after maybe_trim_front drops the keys before
a chunk), so the layer attends the case's keys alone at the case's positions.  The
scale is head_dim**-0.5 (#L66).  mlx and mlx_lm are imported inside functions only.
"""
from __future__ import annotations

import numpy as np

from conformance.contract.runner import Count, NotExpressible, Observation, Translation
from conformance.runners.mlx.common import MlxRunner, held_dtype, import_mlx, to_f64, to_mx

LLAMA4 = "https://github.com/ml-explore/mlx-lm/blob/v0.32.2/mlx_lm/models/llama4.py"
CACHE = "https://github.com/ml-explore/mlx-lm/blob/v0.32.2/mlx_lm/models/cache.py#L727-L775"
SYSTEM = "mlx_lm.models.llama4.Attention"


def layer_limits(case) -> str | None:
    """Why no layer of mlx-lm's Llama 4 computes the case, or None."""
    a, rope, chunk = case.attention, case.attention.rope, case.mask.chunk
    if (rope is None) != (chunk is None):
        return ("attention.rope without mask.chunk, or a chunk without rope: mlx-lm's Llama 4 "
                "rotates exactly its chunked layers (use_rope = (idx + 1) % 4 != 0, "
                f"use_chunked_attention alike, {LLAMA4}#L59, #L252)")
    if rope is not None and a.temperature is not None:
        return ("attention.temperature with attention.rope: the temperature applies only on "
                f"the layers without RoPE (`not self.use_rope`, {LLAMA4}#L115)")
    if rope is not None and (rope.style != "interleaved" or rope.rotary_dim != a.qk_head_dim
                             or rope.scaling is not None):
        return ("rope other than interleaved over the whole head without scaling: the layer "
                "calls initialize_rope(head_dim, rope_theta, traditional=True, ...) "
                f"({LLAMA4}#L79-L86)")
    return None


def shape_limits(case) -> str | None:
    a, i = case.attention, case.inputs
    if not i.self_attention:
        return "cross-attention: Attention.__call__(x, mask, cache) projects one input"
    if a.qk_head_dim != a.v_head_dim or a.output_features != a.query_features:
        return ("one head_dim for q, k and v, and o_proj back to hidden_size "
                f"({LLAMA4}#L72-L75)")
    if case.has_non_causal_mask or case.mask.causal == "none":
        return ("a mask other than the causal one: LlamaModel builds each layer's mask itself "
                f"(causal, or causal within chunks; {LLAMA4}#L237-L249)")
    if a.scale is not None and abs(a.scale - a.qk_head_dim ** -0.5) > 1e-12 * a.scale:
        return f"scale={a.scale:g}: Attention sets self.scale = head_dim**-0.5 ({LLAMA4}#L66)"
    return None


def text_args(case) -> dict:
    """TextArgs keywords for the case: its widths, the layer's rope, chunk and temperature."""
    a, t = case.attention, case.attention.temperature
    return {"attention_bias": a.bias, "attention_chunk_size": case.mask.chunk or 8192,
            "head_dim": a.qk_head_dim, "hidden_size": a.query_features,
            "interleave_moe_layer_step": 1, "intermediate_size": 1,
            "intermediate_size_mlp": 1, "max_position_embeddings": 8192,
            "model_type": "llama4_text", "num_attention_heads": a.num_heads,
            "num_experts_per_tok": 1, "num_hidden_layers": 4,
            "num_key_value_heads": a.num_kv_heads, "num_local_experts": 1,
            "rms_norm_eps": 1e-5, "rope_scaling": None,
            "rope_theta": 500000.0 if a.rope is None else float(a.rope.base),
            "use_qk_norm": False, "vocab_size": 1, "attn_temperature_tuning": int(t is not None),
            **({} if t is None else {"floor_scale": t.floor_scale, "attn_scale": t.attn_scale})}


def linear_weights(case, weights) -> dict[str, np.ndarray]:
    """Canonical -> q_proj, k_proj, v_proj, o_proj (out, in) weights and biases."""
    def out_in(w):
        return np.ascontiguousarray(w.transpose(0, 2, 1).reshape(-1, w.shape[1]))
    named = {"q_proj.weight": out_in(weights.wq), "k_proj.weight": out_in(weights.wk),
             "v_proj.weight": out_in(weights.wv),
             "o_proj.weight": np.ascontiguousarray(weights.wo.reshape(-1, weights.wo.shape[-1]).T)}
    if case.attention.bias:
        named.update({"q_proj.bias": weights.bq.ravel(), "k_proj.bias": weights.bk.ravel(),
                      "v_proj.bias": weights.bv.ravel(), "o_proj.bias": weights.bo})
    return named


class MlxLmLlama4(MlxRunner):
    name = "mlx_lm.llama4"
    typed_system = "hf.llama"  # TextArgs: LlamaConfig's words
    system = SYSTEM
    path = "one layer of mlx_lm.models.llama4.LlamaModel, its mask from the model"
    requires = ("mlx", "mlx_lm")
    description = ("mlx-lm's Llama 4 `Attention` (layer 0: interleaved RoPE, chunked; layer "
                   "3: no RoPE, causal, the temperature), its mask from `LlamaModel`, "
                   "positions from a `ChunkedKVCache` offset")
    features = MlxRunner.features | {"rope", "position_offset", "chunk", "temperature"}
    # its rotated layers are chunked (layer 0): a probe asking rope or a chunk alone takes
    # the form with both, a chunk past every probe position where the probe sets none
    probe_needs = {"rope": {"style": "interleaved"}}
    probe_mask_needs = {"causal": "upper_left", "chunk": 64}

    def translate(self, case):
        why = shape_limits(case) or layer_limits(case)
        if why:
            return NotExpressible(why)
        idx = 0 if case.attention.rope is not None else 3
        kw = ", ".join(f"{k}={v!r}" for k, v in text_args(case).items()
                       if k in ("attention_chunk_size", "rope_theta", "attn_temperature_tuning",
                                "floor_scale", "attn_scale", "attention_bias"))
        p0 = case.inputs.position_offset
        return Translation(f"Attention(TextArgs({kw}, ...), layer_idx={idx})(x, mask=<"
                           f"LlamaModel's mask for layer {idx}>, cache=ChunkedKVCache(offset="
                           f"start_position={p0}))", {"layer": idx})

    def count(self, case):
        from mlx.utils import tree_flatten
        from mlx_lm.models import llama4

        layer = llama4.Attention(llama4.TextArgs(**text_args(case)), 0)
        shapes = {n: tuple(v.shape) for n, v in tree_flatten(layer.parameters())}
        return Count(sum(int(np.prod(s)) for s in shapes.values()), shapes,
                     "mlx parameter tree (lazy arrays, never evaluated)")

    def model_masks(self, mx, args, caches, batch: int, length: int) -> dict:
        """layer index -> the mask LlamaModel.__call__ builds for it (its layers recorded)."""
        from mlx_lm.models import llama4

        model, seen = llama4.LlamaModel(args), {}

        def recorder(i):
            def record(h, mask, cache=None):
                seen[i] = mask
                return h
            return record
        model.layers = [recorder(i) for i in range(args.num_hidden_layers)]
        model(mx.zeros((batch, length), dtype=mx.int32), cache=caches)
        return seen

    def run(self, case, translation, data):
        mx, _ = import_mlx()
        from mlx.utils import tree_flatten
        from mlx_lm.models import llama4
        from mlx_lm.models.cache import ChunkedKVCache

        dtype, idx, i = case.inputs.dtype, translation.plan["layer"], case.inputs
        args = llama4.TextArgs(**text_args(case))
        caches = [ChunkedKVCache(args.attention_chunk_size) for _ in range(4)]
        for c in caches:  # positions start at the case's offset; no earlier key is held
            c.offset = c.start_position = i.position_offset
        mask = self.model_masks(mx, args, caches, i.batch, i.query_len)[idx]
        layer = llama4.Attention(args, idx)
        layer.set_dtype(getattr(mx, dtype))
        layer.load_weights([(n, to_mx(mx, a, dtype)) for n, a in
                            linear_weights(case, data.weights).items()], strict=True)
        out = layer(to_mx(mx, data.inputs.query, dtype), mask=mask, cache=caches[idx])
        mx.eval(out)
        shapes = {n: tuple(v.shape) for n, v in tree_flatten(layer.parameters())}
        mask_word = mask if isinstance(mask, str) else f"boolean {tuple(mask.shape)}"
        return Observation(
            output=to_f64(mx, out), parameters=sum(int(np.prod(s)) for s in shapes.values()),
            weight_shapes=shapes,
            notes=[f"layer {idx} (use_rope={layer.use_rope}, attn_temperature_tuning="
                   f"{layer.attn_temperature_tuning}); LlamaModel's mask for it: {mask_word}; "
                   f"ChunkedKVCache offset {i.position_offset} ({CACHE})",
                   "returns no attention weights"],
            extras={"output_dtype": held_dtype(out), "mask": mask_word})
