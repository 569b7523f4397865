"""keras_hub's Qwen3.5 vision attention: `Qwen3_5VisionAttention` with the 2-D rope its
encoder computes, in the Keras JAX worker.

keras_hub 0.32 (ENCODER below): Qwen3_5VisionRotaryEmbedding keeps the inverse frequencies
of a rope head_dim / 2 wide (#L18-L28: dim = head_dim // 2, "each spatial axis gets
head_dim/2 dims"); Qwen3_5VisionEncoder._rot_pos_emb looks a patch's row and its column up
in that one table and concatenates [row | column], then doubles it for the half-split
rotation (#L657-L733); Qwen3_5VisionAttention.call(x (seq, hidden), (cos, sin),
cu_seqlens) applies it to q and k (#L215-L247) and attends within each cu_seqlens chunk
with no mask (#L252-L270).  The runner computes (cos, sin) with the encoder's own
_rot_pos_emb (spatial_merge_size 1: patches in row-major order) for the case's grid, packs
the batch items as images one after another (cu_seqlens 0, N, 2N, ...), and assigns the
canonical weights to `qkv` (Dense to 3 hidden, [q | k | v] head by head) and `proj`, both
biased.  A mask, a causal flag, grouped heads, a 1-D rope or the alternating layout are
not expressible.
"""
from __future__ import annotations

import types

import numpy as np

from conformance.contract.runner import (
    NotExpressible, Observation, Runner, Translation, harness_limit)
from conformance.runners._export.keras_mha import worker_spec
from conformance.runners.keras.hub import SRC, missing_hub

ENCODER = SRC + "models/qwen3_5/qwen3_5_vision_encoder.py"
LAYER = "Qwen3_5VisionAttention"


def limits(case) -> str | None:
    a, i, m = case.attention, case.inputs, case.mask
    r = a.rope
    multi = None if r is None else r.multi_axis
    if multi is None:
        return harness_limit(f"{LAYER} is asked 2-D grid cases (attention.rope.multi_axis): "
                             "its (cos, sin) come from the encoder's patch grid")
    if multi.kind != "grid_2d" or multi.layout != "shared":
        return (f"rope.multi_axis {multi.kind} {multi.layout}: the encoder looks rows and "
                f"columns up in one table of a head_dim / 2 rope ({ENCODER}#L18-L28, "
                "#L657-L733)")
    if r.style != "half_split" or r.rotary_dim != a.qk_head_dim:
        return "the rotation is half-split over the whole head (_apply_rotary, #L215-L224)"
    if a.num_kv_heads != a.num_heads or not i.self_attention or not a.bias:
        return (f"{LAYER} projects one sequence with qkv and proj, Dense(use_bias=True), "
                f"num_heads heads each ({ENCODER}#L198-L213)")
    if (a.qk_head_dim * a.num_heads != a.query_features or a.v_head_dim != a.qk_head_dim
            or a.output_features != a.query_features):
        return "head_dim = hidden_size // num_heads, the output back to hidden_size"
    if case.has_non_causal_mask or m.causal != "none" or m.window is not None:
        return (f"a mask or causal flag: {LAYER}.call takes none; an image attends to all "
                f"its patches ({ENCODER}#L252-L270)")
    if a.scale is not None and abs(a.scale - a.qk_head_dim ** -0.5) > 1e-15:
        return "a scale other than 1 / sqrt(head_dim)"
    return None


class KerasHubQwen35Vision(Runner):
    """keras_hub's Qwen3_5VisionAttention on the canonical weights, in the Keras JAX worker."""

    name = "keras_hub.qwen3_5_vision"
    framework = "keras"
    system = "keras_hub.src.models.qwen3_5.qwen3_5_vision_encoder.Qwen3_5VisionAttention"
    typed_system = "keras_hub.qwen3_5_vision"  # Qwen3_5VisionAttention's words
    description = ("keras_hub's `Qwen3_5VisionAttention` (fused qkv, 2-D rope from the "
                   "encoder's `_rot_pos_emb`: rows and columns on one ladder)")
    path = "Qwen3_5VisionAttention(hidden, heads)(x, (cos, sin), cu_seqlens)"
    backend = "jax"
    requires = ("keras", "jax", "keras_hub")
    features = frozenset({"fill", "rope", "multi_axis_rope"})
    seconds = 1.0

    def __init__(self, **params):
        super().__init__(**params)
        self.worker = worker_spec(self.backend)

    def available(self) -> str | None:
        return missing_hub() or super().available()

    def translate(self, case):
        why = limits(case)
        if why:
            return NotExpressible(why)
        a, g = case.attention, case.attention.rope.multi_axis.grid
        plan = {"hidden_size": a.query_features, "num_heads": a.num_heads,
                "theta": float(a.rope.base), "grid": list(g)}
        return Translation(f"{LAYER}(hidden_size={a.query_features}, num_heads={a.num_heads})"
                           f"(x, Qwen3_5VisionEncoder._rot_pos_emb([[1, {g[0]}, {g[1]}]]), "
                           "cu_seqlens)", plan)

    @staticmethod
    def embeddings(plan: dict):
        """(cos, sin) of the encoder's own _rot_pos_emb for one image of the plan's grid."""
        from keras_hub.src.models.qwen3_5.qwen3_5_vision_encoder import (
            Qwen3_5VisionEncoder, Qwen3_5VisionRotaryEmbedding)

        head_dim = plan["hidden_size"] // plan["num_heads"]
        encoder = types.SimpleNamespace(spatial_merge_size=1, rotary_pos_emb=(
            Qwen3_5VisionRotaryEmbedding(head_dim, plan["theta"])))
        rows, cols = plan["grid"]
        return Qwen3_5VisionEncoder._rot_pos_emb(encoder, [[1, rows, cols]])

    def run(self, case, translation, data):
        import keras
        from keras_hub.src.models.qwen3_5.qwen3_5_vision_encoder import Qwen3_5VisionAttention

        plan, w, dt = translation.plan, data.weights, case.inputs.dtype
        b, n, e = data.inputs.query.shape
        layer = Qwen3_5VisionAttention(plan["hidden_size"], plan["num_heads"], dtype=dt,
                                       name="qwen3_5_vision_attention")  # no counter
        layer.build((None, e))
        rows = lambda m: m.transpose(1, 0, 2).reshape(e, -1)  # noqa: E731 (E, H*d)
        layer.qkv.kernel.assign(np.concatenate([rows(w.wq), rows(w.wk), rows(w.wv)], 1)
                                .astype(dt))
        layer.qkv.bias.assign(np.concatenate([w.bq.ravel(), w.bk.ravel(), w.bv.ravel()])
                              .astype(dt))
        layer.proj.kernel.assign(w.wo.reshape(-1, w.wo.shape[-1]).astype(dt))
        layer.proj.bias.assign(np.asarray(w.bo, dt))
        cos, sin = (keras.ops.tile(t, (b, 1)) for t in self.embeddings(plan))
        cu = np.arange(0, (b + 1) * n, n, dtype="int32")
        out = layer(np.asarray(data.inputs.query, dt).reshape(b * n, e), (cos, sin),
                    cu_seqlens=cu if b > 1 else None)
        out = np.asarray(keras.ops.convert_to_numpy(out), np.float64).reshape(b, n, e)
        return Observation(
            output=out, parameters=int(layer.count_params()),
            weight_shapes={v.path: tuple(int(d) for d in v.shape) for v in layer.weights},
            notes=["(cos, sin) from Qwen3_5VisionEncoder._rot_pos_emb (spatial_merge_size "
                   f"1) of a {plan['grid'][0]}x{plan['grid'][1]} grid",
                   f"{b} items packed as images: cu_seqlens {cu.tolist()}"],
            extras={"backend": self.backend})

    def signatures(self):
        from keras_hub.src.models.qwen3_5.qwen3_5_vision_encoder import Qwen3_5VisionAttention

        return (LAYER, (Qwen3_5VisionAttention.__init__, Qwen3_5VisionAttention.call))
